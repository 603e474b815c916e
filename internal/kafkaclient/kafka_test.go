package kafkaclient

import (
	"context"
	"errors"
	"hash"
	"hash/fnv"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ivrsched/ivrsched/codec"
)

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
	k := config(cluster, "test")
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
			topics(t, k, topic)
			// The broker appends the batch, then answers with a
			// retriable error, as when a follower fell out of the ISR.
			fault := cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicasAfterAppend})
			defer fault.Remove()
			p, err := tc.build(k.Brokers, k.ClientID, k.Hasher)
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
	k := Kafka{Hasher: fnv.New32a, Brokers: []string{"127.0.0.1:1"}, Partitions: 1, Replication: 1, FetchWait: time.Millisecond, BackgroundFetchWait: 10 * time.Millisecond}
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
	if err := k.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate with a 2 s background wait: %v", err)
	}
}

// The largest value ValueBound lets through, under the longest key, is a
// record the producer accepts (Sarama's own count of its size), with room
// for a record batch's header, which the broker counts.
func TestValueBoundFitsTheProducer(t *testing.T) {
	c := sarama.NewConfig()
	bound := ValueBound(c)
	m := &sarama.ProducerMessage{Key: sarama.ByteEncoder(make([]byte, codec.MaxIDBytes)), Value: sarama.ByteEncoder(make([]byte, bound))}
	if n := m.ByteSize(2); n+61 > c.Producer.MaxMessageBytes {
		t.Fatalf("a record of the bound counts %d bytes (+61 of batch header), MaxMessageBytes %d", n, c.Producer.MaxMessageBytes)
	}
	if bound < c.Producer.MaxMessageBytes-1024 {
		t.Fatalf("bound %d wastes more than 1 KiB of %d", bound, c.Producer.MaxMessageBytes)
	}
}
