package scheduler

import (
	"sync"
	"testing"
	"time"
)

// timedObserver records what the scheduler observes.
type timedObserver struct {
	mu    sync.Mutex
	plain []float64
	at    []time.Time
	late  []float64
}

func (o *timedObserver) Observe(v float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.plain = append(o.plain, v)
}

func (o *timedObserver) ObserveAt(v float64, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.late, o.at = append(o.late, v), append(o.at, at)
}

// A TimedObserver of the lateness is given each fire's lateness with the
// clock reading the tick fired it at, so that it reads no clock itself.
func TestLatenessObserverGetsTheFireTime(t *testing.T) {
	o := &timedObserver{}
	h := newHarness(t, func(c *Config) { c.Lateness = o })
	h.onboard("u1", delay("t1", 10*time.Second))
	h.tickAt(12 * time.Second)
	h.expectCalls("t1")
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.plain) != 0 || len(o.late) != 1 || o.late[0] != 2 || !o.at[0].Equal(t0.Add(12*time.Second)) {
		t.Fatalf("observed %v plainly, %v at %v; want 2 s at t0+12s", o.plain, o.late, o.at)
	}
}
