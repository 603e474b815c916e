package kafkaclient

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"
	"github.com/lovoo/goka"
)

// fakeEmitter answers each record with the next error of errs (nil once
// they run out), as Sarama's producer answers through the promise.
type fakeEmitter struct {
	errs     []error
	finished bool
}

func (f *fakeEmitter) Emit(string, any) (*goka.Promise, error) {
	p, finish := goka.NewPromiseWithFinisher()
	var err error
	if len(f.errs) > 0 {
		err, f.errs = f.errs[0], f.errs[1:]
	}
	finish(nil, err)
	return p, nil
}

func (f *fakeEmitter) Finish() error { f.finished = true; return nil }

// An emitter whose record came back refused by Sarama's open circuit
// breaker is built anew at the next Emit, not sooner than a second after
// the last build, and the old one finished; records that go through, or
// fail otherwise, keep it.
func TestRevivingEmitterRebuildsAfterAnOpenBreaker(t *testing.T) {
	refused := sarama.ProducerError{Msg: &sarama.ProducerMessage{Topic: "ticks"}, Err: breaker.ErrBreakerOpen}
	first := &fakeEmitter{errs: []error{nil, errors.New("kafka: client has run out of available brokers"), refused, refused}}
	var built []*fakeEmitter
	clk := &fakeClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	r, err := NewRevivingEmitter("ticks", clk, slog.New(slog.NewTextHandler(io.Discard, nil)), func() (Emitter, error) {
		e := first
		if len(built) > 0 {
			e = &fakeEmitter{}
		}
		built = append(built, e)
		return e, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	emit := func() {
		t.Helper()
		if _, err := r.Emit("k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	emit() // through
	emit() // another error: kept
	clk.Advance(2 * time.Second)
	emit() // refused by the breaker: marked
	if len(built) != 1 {
		t.Fatalf("%d builds before a refusal was seen, want 1", len(built))
	}
	emit() // the last build was 2 s ago: built anew
	r.old.Wait()
	if len(built) != 2 || !first.finished {
		t.Fatalf("%d builds after a refusal (want 2), old finished %v", len(built), first.finished)
	}
	built[1].errs = []error{refused}
	emit() // refused again by the new one
	emit() // less than a second after the last build: kept
	if len(built) != 2 {
		t.Fatalf("%d builds within a second of the last, want 2", len(built))
	}
	clk.Advance(time.Second)
	emit()
	if len(built) != 3 {
		t.Fatalf("%d builds a second later, want 3", len(built))
	}
	if err := r.Finish(); err != nil || !built[2].finished {
		t.Fatalf("Finish: %v, current finished %v", err, built[2].finished)
	}
}

// fakeClock is a Clock that moves only when told (this package imports
// nothing of ivrsched's, internal/clock neither).
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }
