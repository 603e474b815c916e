package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/suppress"
	"github.com/ivrsched/ivrsched/topology"
)

var testSuppressionKey = suppress.Key("app-test-suppression-key-0123456789")

// A role that reads the do-not-call list does not start without a key, or
// with one too short, and says so before it reaches for the brokers.
func TestRolesRefuseToStartWithoutASuppressionKey(t *testing.T) {
	for _, c := range []struct {
		key  suppress.Key
		want string
	}{{nil, "--suppression-key-file or IVRSCHED_SUPPRESSION_KEY"}, {suppress.Key("short"), "at least 32"}} {
		cfg := Config{
			Kafka:          kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: []string{"127.0.0.1:1"}, Partitions: 1, Replication: 1},
			Topics:         topology.NewTopics("nokey-"),
			DataDir:        t.TempDir(),
			SuppressionKey: c.key,
		}
		for _, roles := range []Roles{{Scheduler: true}, {Dialer: true}} {
			err := Run(context.Background(), cfg, roles, nil)
			if !errors.Is(err, kafkaclient.ErrConfig) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("key %q, roles %+v: %v, want a configuration error with %q", c.key, roles, err, c.want)
			}
		}
	}
}

// The view reads a list of 200,000 entries on 8 partitions within seconds
// (it took about 3 minutes with Goka's memory storage, which sorts its
// keys at every new one; issue 33) and then answers from it.
func TestSuppressionViewReadsALargeListQuickly(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 200,000 records")
	}
	const n = 200_000
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: cluster.ListenAddrs(), Partitions: 8, Replication: 1, ClientID: "dnc-load"}
	cfg := Config{Kafka: k, Topics: topology.NewTopics("dnc-load-")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := topology.EnsureTopics(ctx, k, cfg.Topics.Specs()); err != nil {
		t.Fatal(err)
	}
	sc := k.Sarama()
	sc.Producer.Flush.Bytes = 512 << 10
	sc.Producer.Flush.Frequency = 5 * time.Millisecond
	p, err := sarama.NewAsyncProducer(k.Brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range p.Successes() {
		}
	}()
	go func() {
		for err := range p.Errors() {
			t.Error(err)
		}
	}()
	value, err := proto.Marshal(&pb.Suppression{Reason: "ivrbench", AddedAt: timestamppb.Now()})
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int) string { return testSuppressionKey.Hash(strconv.Itoa(i)) }
	for i := 0; i < n; i++ {
		p.Input() <- &sarama.ProducerMessage{Topic: string(cfg.Topics.Suppressions), Key: sarama.StringEncoder(key(i)), Value: sarama.ByteEncoder(value)}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	sv, err := newSuppressionView(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	ended := make(chan error, 1)
	go func() { ended <- sv.Run(ctx) }()
	select {
	case <-sv.Ready():
		t.Logf("%d entries read in %v", n, time.Since(began).Round(time.Millisecond))
	case err := <-ended:
		t.Fatalf("the view ended before it was ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("%d entries not read within 30 s", n)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if got, err := sv.Get(key(i)); err != nil || string(got) != string(value) {
			t.Errorf("Get of entry %d = %q, %v; want %q", i, got, err, value)
		}
	}
	if got := sv.entries(); got != n {
		t.Errorf("the view holds %d entries, want %d", got, n)
	}
	if got, err := sv.Get(key(n)); err != nil || got != nil {
		t.Errorf("Get of a number not on the list = %q, %v; want nil", got, err)
	}
}
