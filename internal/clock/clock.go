// Package clock injects time: components read the clock they were given, and
// tests move a fake one.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and waits for it.
type Clock interface {
	Now() time.Time
	// After delivers the time on the channel once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// After is time.After.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Fake is a clock that moves only when told to. It is safe for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	added   *sync.Cond // broadcast when After adds a waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a fake clock set to t.
func NewFake(t time.Time) *Fake {
	f := &Fake{now: t}
	f.added = sync.NewCond(&f.mu)
	return f
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// After returns a channel that receives once the fake time reaches now+d.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	at := f.now.Add(d)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, waiter{at: at, ch: ch})
	f.added.Broadcast()
	return ch
}

// BlockUntil returns once n goroutines wait on the clock (After channels
// not yet delivered), so a test moves the time only after they wait.
func (f *Fake) BlockUntil(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.waiters) < n {
		f.added.Wait()
	}
}

// Advance moves the time forward by d and wakes the waiters that are due.
func (f *Fake) Advance(d time.Duration) { f.Set(f.Now().Add(d)) }

// Set moves the time to t (never backwards) and wakes the waiters that are due.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.now) {
		f.now = t
	}
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.at.After(f.now) {
			w.ch <- f.now
			continue
		}
		kept = append(kept, w)
	}
	f.waiters = kept
}

// Waiting returns how many After channels wait for the fake time to move.
func (f *Fake) Waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// AdvanceToNext moves the time to the earliest waiter's and wakes it (and
// any due with it); without waiters it does nothing.
func (f *Fake) AdvanceToNext() {
	f.mu.Lock()
	if len(f.waiters) == 0 {
		f.mu.Unlock()
		return
	}
	next := f.waiters[0].at
	for _, w := range f.waiters[1:] {
		if w.at.Before(next) {
			next = w.at
		}
	}
	f.mu.Unlock()
	f.Set(next)
}

// Jump sets the time to t, backwards too (a wall-clock step back), without
// waking anyone.
func (f *Fake) Jump(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}
