package topology_test

import (
	"context"
	"errors"
	"hash"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ivrsched/ivrsched/topology"
)

// Topics with three replicas get min.insync.replicas=2: with acks=all a
// write is on two brokers before it counts, and one broker may be down.
func TestEnsureTopicsSetsMinInSyncReplicas(t *testing.T) {
	for replication, want := range map[int]int{1: 1, 2: 1, 3: 2, 5: 4} {
		if got := (topology.Kafka{Replication: replication}).MinInSyncReplicas(); got != want {
			t.Errorf("replication %d: min.insync.replicas %d, want %d", replication, got, want)
		}
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	k := topology.Kafka{Brokers: cluster.ListenAddrs(), Partitions: 2, Replication: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	specs := topology.NewTopics("").Specs()
	if err := topology.EnsureTopics(ctx, k, specs); err != nil {
		t.Fatal(err)
	}
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, s := range specs {
		entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: s.Name, ConfigNames: []string{"min.insync.replicas"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Value != "2" {
			t.Errorf("%s: min.insync.replicas %+v, want 2", s.Name, entries)
		}
	}
}

// A second start finds its topics from a metadata request for them alone
// (not a description of every topic of the cluster) and still refuses one
// whose partitions or cleanup policy differ.
func TestEnsureTopicsChecksExistingTopics(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	k := topology.Kafka{Brokers: cluster.ListenAddrs(), Partitions: 2, Replication: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	specs := topology.NewTopics("a-").Specs()
	for range 2 {
		if err := topology.EnsureTopics(ctx, k, specs); err != nil {
			t.Fatal(err)
		}
	}
	wider := k
	wider.Partitions = 3
	if err := topology.EnsureTopics(ctx, wider, specs); !errors.Is(err, topology.ErrTopicMismatch) {
		t.Errorf("3 partitions against 2: %v, want ErrTopicMismatch", err)
	}
	// A table topic that exists without compaction.
	table := []topology.TopicSpec{{Name: "b-table", Retain: time.Hour}}
	if err := topology.EnsureTopics(ctx, k, table); err != nil {
		t.Fatal(err)
	}
	table[0].Compact = true
	if err := topology.EnsureTopics(ctx, k, table); !errors.Is(err, topology.ErrTopicMismatch) {
		t.Errorf("a table topic with cleanup.policy=delete: %v, want ErrTopicMismatch", err)
	}
}

// The producers ivrsched builds are not idempotent (docs/design.md says
// why): a batch that the broker wrote but answered with a retriable error
// is written again, and the record is there twice, which the call ids
// absorb. The same producer with Sarama's idempotence keeps one copy (so
// the test tells them apart). On the embedded broker (kfake).
func TestProducerIsNotIdempotent(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	k := topology.Kafka{Brokers: cluster.ListenAddrs(), ClientID: "test", Partitions: 1, Replication: 1, FlushFrequency: time.Millisecond}
	withIdempotence := func(brokers []string, clientID string, hasher func() hash.Hash32) (goka.Producer, error) {
		cfg := k.Sarama()
		cfg.Producer.Idempotent = true
		return goka.ProducerBuilderWithConfig(cfg)(brokers, clientID, hasher)
	}
	for _, tc := range []struct {
		name       string
		build      goka.ProducerBuilder
		wantCopies int
		wantPID    bool
	}{
		{"ivrsched", k.ProducerBuilder, 2, false},
		{"with idempotence", withIdempotence, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := "idempotence-" + strconv.Itoa(tc.wantCopies)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := topology.EnsureTopics(ctx, k, []topology.TopicSpec{{Name: topic, Retain: time.Hour}}); err != nil {
				t.Fatal(err)
			}
			// The broker appends the batch, then answers with a
			// retriable error, as when a follower fell out of the ISR.
			fault := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicasAfterAppend})
			defer fault.Remove()
			p, err := tc.build(k.Brokers, k.ClientID, topology.Murmur2())
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			p.Emit(topic, "user-1", []byte("call")).Then(func(err error) { done <- err })
			if err := <-done; err != nil {
				t.Fatalf("emit: %v", err)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if hits := fault.Hits(); hits != 1 {
				t.Fatalf("the fault answered %d produce requests, want 1", hits)
			}
			records := readAll(ctx, t, k.Brokers, topic)
			if len(records) != tc.wantCopies {
				t.Fatalf("%d copies of the record on %s, want %d", len(records), topic, tc.wantCopies)
			}
			for _, r := range records {
				if hasPID := r.ProducerID >= 0; hasPID != tc.wantPID {
					t.Fatalf("record at offset %d has producer id %d; want one: %v", r.Offset, r.ProducerID, tc.wantPID)
				}
			}
		})
	}
}

// readAll returns every record of topic's partition 0.
func readAll(ctx context.Context, t *testing.T, brokers []string, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	end, err := sarama.NewClient(brokers, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer end.Close()
	newest, err := end.GetOffset(topic, 0, sarama.OffsetNewest)
	if err != nil {
		t.Fatal(err)
	}
	var records []*kgo.Record
	for int64(len(records)) < newest {
		fetches := cl.PollFetches(ctx)
		if err := fetches.Err(); err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		records = append(records, fetches.Records()...)
	}
	return records
}

// The consumers off a fire's path fetch with the background wait; the
// others, and all when it is 0, with FetchWait.
func TestBackgroundFetchWait(t *testing.T) {
	k := topology.Kafka{Brokers: []string{"127.0.0.1:1"}, Partitions: 1, Replication: 1, FetchWait: time.Millisecond, BackgroundFetchWait: 10 * time.Millisecond}
	if got := k.Background().Sarama().Consumer.MaxWaitTime; got != 10*time.Millisecond {
		t.Fatalf("background max wait %v, want 10ms", got)
	}
	if got := k.Sarama().Consumer.MaxWaitTime; got != time.Millisecond {
		t.Fatalf("max wait %v, want 1ms", got)
	}
	k.BackgroundFetchWait = 0
	if got := k.Background().Sarama().Consumer.MaxWaitTime; got != time.Millisecond {
		t.Fatalf("background max wait without its own %v, want FetchWait's 1ms", got)
	}
	k.BackgroundFetchWait = 2 * time.Second
	if err := k.Validate(); !errors.Is(err, topology.ErrConfig) {
		t.Fatalf("Validate with a 2 s background wait: %v", err)
	}
}
