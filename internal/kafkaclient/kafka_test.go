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

// Every consumer fetches at least one byte and waits up to FetchWait,
// Kafka's 500 ms when it is 0; a wait over 1 s, or over half the session
// timeout (the fetch holds the connection of the group's heartbeats), is
// refused.
func TestFetchWaitConfig(t *testing.T) {
	k := Kafka{Hasher: fnv.New32a, Brokers: []string{"127.0.0.1:1"}, Partitions: 1, Replication: 1, FetchWait: 200 * time.Millisecond}
	if c := k.Sarama(); c.Consumer.MaxWaitTime != 200*time.Millisecond || c.Consumer.Fetch.Min != 1 {
		t.Fatalf("max wait %v, min bytes %d; want 200ms and 1", c.Consumer.MaxWaitTime, c.Consumer.Fetch.Min)
	}
	k.FetchWait = 0
	if c := k.Sarama(); c.Consumer.MaxWaitTime != DefaultFetchWait || c.Consumer.Fetch.Min != 1 {
		t.Fatalf("zero wait: max wait %v, min bytes %d; want %v and 1", c.Consumer.MaxWaitTime, c.Consumer.Fetch.Min, DefaultFetchWait)
	}
	if err := k.Validate(); err != nil {
		t.Fatal(err)
	}
	k.FetchWait = 2 * time.Second
	if err := k.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate with a 2 s wait: %v", err)
	}
	k.FetchWait, k.SessionTimeout = time.Second, time.Second
	if err := k.Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Validate with a 1 s wait and a 1 s session timeout: %v", err)
	}
	k.FetchWait = 500 * time.Millisecond
	if err := k.Validate(); err != nil {
		t.Fatalf("Validate with a 500 ms wait and a 1 s session timeout: %v", err)
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
