package kafkaclient

import (
	"errors"
	"testing"
	"time"

	"github.com/eapache/go-resiliency/breaker"
	"github.com/lovoo/goka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Sarama's producer keeps a circuit breaker per topic: after three emits in
// a row whose topic's partitions it could not look up, it fails every emit
// to that topic at once with breaker.ErrBreakerOpen, without asking the
// brokers, for 10 s, even once they answer again (a RevivingEmitter builds
// a new producer then). With the emitters' producer, which writes a key
// again once its failed writes are answered.
func TestProducerBreakerOpensAfterThreeFailedLookups(t *testing.T) {
	c, k := broker(t)
	// The topic is never created: its lookups fail.
	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: "gone", Err: kerr.UnknownTopicOrPartition, Count: -1})
	p, err := k.EmitterProducers()(k.Brokers, k.ClientID, k.Hasher)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	emit := func() error {
		t.Helper()
		return within(t, errs(p.Emit("gone", "key", []byte("v"))), "the emit's answer")
	}
	for i := range 3 {
		if err := emit(); err == nil || errors.Is(err, breaker.ErrBreakerOpen) {
			t.Fatalf("emit %d: %v, want a failed lookup", i, err)
		}
	}
	fault.Remove()
	topics(t, k, "gone")
	began := time.Now()
	if err := emit(); !errors.Is(err, breaker.ErrBreakerOpen) {
		t.Fatalf("emit after three failed lookups, the topic there: %v, want %v", err, breaker.ErrBreakerOpen)
	}
	if d := time.Since(began); d > time.Second {
		t.Fatalf("the open breaker answered after %v, not at once", d)
	}
}

// errs is the error a promise ends with, on a channel.
func errs(p *goka.Promise) <-chan error {
	ch := make(chan error, 1)
	p.Then(func(err error) { ch <- err })
	return ch
}
