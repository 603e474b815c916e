package kafkaclient

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A consumer built with Kafka.Sarama sends one fetch per broker for every
// partition it consumes there, asks for at least one byte and lets the
// broker hold it up to FetchWait: the broker answers as soon as a record
// arrives on any of the partitions, so a long wait costs a fire nothing,
// and an idle consumer fetches about once per FetchWait.
func TestFetchReturnsWhenAnyPartitionHasARecord(t *testing.T) {
	const parts, wait = 8, time.Second
	c, k := broker(t)
	k.Partitions, k.FetchWait = parts, wait
	topics(t, k, "spread")

	var fetches, widest atomic.Int64
	arrived := make(chan struct{}, 64) // a fetch reached the broker
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n := 0
		for _, tp := range req.(*kmsg.FetchRequest).Topics {
			if tp.Topic == "spread" {
				n += len(tp.Partitions)
			}
		}
		if n > 0 {
			fetches.Add(1)
			if int64(n) > widest.Load() {
				widest.Store(int64(n))
			}
			select {
			case arrived <- struct{}{}:
			default:
			}
		}
		return nil, nil, false
	})

	consumer, err := sarama.NewConsumer(k.Brokers, k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got := make(chan *sarama.ConsumerMessage, 16)
	for p := range int32(parts) {
		pc, err := consumer.ConsumePartition("spread", p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for m := range pc.Messages() {
				got <- m
			}
		}()
	}

	// Idle: about one fetch per wait, each for all the partitions.
	within(t, arrived, "first fetch")
	from := fetches.Load()
	time.Sleep(3 * wait) // a span of idle time is what is measured
	if n := fetches.Load() - from; n > 5 {
		t.Errorf("idle for %v with a %v fetch wait: %d fetches, want at most 5", 3*wait, wait, n)
	}
	if w := widest.Load(); w != parts {
		t.Errorf("widest fetch covers %d partitions of %d, want one fetch for all", w, parts)
	}

	// A record on any partition returns the held fetch at once.
	seen := map[int32]bool{}
	for i := 0; len(seen) < 3 && i < 32; i++ {
		for len(arrived) > 0 {
			<-arrived
		}
		within(t, arrived, "a fetch to hold") // just sent: the broker holds it
		start := time.Now()
		produce(t, k, "spread", "user-"+string(rune('a'+i)), "v")
		m := within(t, got, "the record")
		if d := time.Since(start); d > wait/2 {
			t.Fatalf("record on partition %d arrived %v after it was produced, with a %v fetch wait: the fetch was held to its end", m.Partition, d, wait)
		}
		seen[m.Partition] = true
	}
	if len(seen) < 3 {
		t.Fatalf("records landed on %d partitions, want 3", len(seen))
	}
}
