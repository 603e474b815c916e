package kafkaclient

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eapache/go-resiliency/breaker"
	"github.com/lovoo/goka"
)

// RevivingEmitter is a long-lived goka.Emitter (the scheduler's ticks, the
// dialer's loop) that is built anew when Sarama's producer refuses records
// with its circuit breaker open.
//
// Sarama's async producer keeps a circuit breaker per topic (and per
// partition) for its metadata lookups: three failures in a row, as while a
// broker is down, open it, and an open breaker refuses every record for 10
// s, then tries one; its settings are constants of Sarama. So after a
// broker restart, a producer that tried during the outage could refuse
// ticks for up to 10 s after the broker was back (a system test saw the
// first follow-up due during a 3 s outage fired 10.4 s after it). A new
// producer has closed breakers: once a record came back refused by an
// open breaker, the next Emit builds a new emitter (at most once per
// revive interval; while the brokers do not answer, building fails and
// the old one is kept) and the old one is finished in the background.
//
// Emit is safe for concurrent use.
type RevivingEmitter struct {
	build func() (Emitter, error)
	clock Clock
	log   *slog.Logger
	name  string

	refused atomic.Bool // a record came back refused by an open breaker
	mu      sync.Mutex
	em      Emitter
	built   time.Time
	old     sync.WaitGroup // old emitters finishing
}

// Emitter is what a RevivingEmitter builds and is: a *goka.Emitter.
type Emitter interface {
	Emit(key string, msg any) (*goka.Promise, error)
	Finish() error
}

var _ Emitter = (*goka.Emitter)(nil)

// Clock is the time a RevivingEmitter reads (internal/clock's clocks are
// ones).
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// reviveEvery bounds how often an emitter is built anew.
const reviveEvery = time.Second

// NewRevivingEmitter builds the first emitter with build and returns the
// RevivingEmitter that builds the next ones with it; name names it in the
// log. A nil clk is the system clock.
func NewRevivingEmitter(name string, clk Clock, log *slog.Logger, build func() (Emitter, error)) (*RevivingEmitter, error) {
	if clk == nil {
		clk = realClock{}
	}
	em, err := build()
	if err != nil {
		return nil, err
	}
	return &RevivingEmitter{build: build, clock: clk, log: log, name: name, em: em, built: clk.Now()}, nil
}

// Emit sends msg keyed by key through the current emitter.
func (r *RevivingEmitter) Emit(key string, msg any) (*goka.Promise, error) {
	em := r.current()
	prom, err := em.Emit(key, msg)
	if err != nil {
		return nil, err
	}
	return prom.Then(func(err error) {
		if errors.Is(err, breaker.ErrBreakerOpen) {
			r.refused.Store(true)
		}
	}), nil
}

// current returns the emitter to use, built anew first if a record was
// refused by an open breaker.
func (r *RevivingEmitter) current() Emitter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.refused.Load() || r.clock.Now().Sub(r.built) < reviveEvery {
		return r.em
	}
	r.built = r.clock.Now()
	em, err := r.build()
	if err != nil {
		r.log.Warn("emitter refused records with Sarama's circuit breaker open; building a new one failed, keeping it", "emitter", r.name, "err", err)
		return r.em
	}
	r.refused.Store(false)
	old := r.em
	r.em = em
	r.log.Info("emitter refused records with Sarama's circuit breaker open; built a new one", "emitter", r.name)
	r.old.Add(1)
	go func() {
		defer r.old.Done()
		if err := old.Finish(); err != nil {
			r.log.Debug("finish the emitter replaced", "emitter", r.name, "err", err)
		}
	}()
	return em
}

// Finish flushes and closes the current emitter, after the replaced ones.
func (r *RevivingEmitter) Finish() error {
	r.old.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.em.Finish()
}

// GokaEmitter builds a goka.Emitter of topic for a RevivingEmitter.
func GokaEmitter(brokers []string, topic goka.Stream, c goka.Codec, opts ...goka.EmitterOption) func() (Emitter, error) {
	return func() (Emitter, error) {
		em, err := goka.NewEmitter(brokers, topic, c, opts...)
		if err != nil {
			return nil, err
		}
		return em, nil
	}
}
