package kafkaclient

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A broker closes a client connection idle for its connections.max.idle.ms
// (10 minutes by default), and Sarama's producer learns it only when its
// next request on it fails. That request is retried on a new connection at
// once, not after Retry.Backoff: the first fire after an idle stretch is
// not late by a backoff per hop (retryBackoff; the whole path on Apache
// Kafka: systemtest's TestFirstFireAfterAnIdleStretch). Here the fake
// broker closes the connection on the second produce request, as Kafka
// does to an idle one.
func TestProducerRetriesOnAClosedConnectionAtOnce(t *testing.T) {
	c, k := broker(t)
	topics(t, k, "idle")
	var mu sync.Mutex
	var produces []time.Time
	closed := false
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		produces = append(produces, time.Now())
		if len(produces) == 2 && !closed {
			closed = true
			return nil, errors.New("connection idle past connections.max.idle.ms"), true
		}
		return nil, nil, false
	})
	p, err := sarama.NewSyncProducer(k.Brokers, k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 2 {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "idle", Value: sarama.StringEncoder("v")}); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(produces) != 3 {
		t.Fatalf("%d produce requests, want 3 (one, one on the closed connection, its retry)", len(produces))
	}
	if gap := produces[2].Sub(produces[1]); gap >= 100*time.Millisecond {
		t.Fatalf("the retry came %v after the connection closed, want at once (less than Sarama's 100 ms backoff)", gap)
	}
}
