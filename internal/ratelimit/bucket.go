// Package ratelimit paces requests with a token bucket whose rate may change
// while it is in use, on an injected clock.
package ratelimit

import (
	"context"
	"math"
	"sync"
	"time"
)

// Clock tells the time and waits for it: internal/clock's Clock, declared
// here so that this package imports nothing of the project's (a leaf:
// .ci/imports); any clock.Clock is one.
type Clock interface {
	Now() time.Time
	// After delivers the time on the channel once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Bucket hands out tokens at a rate per second, with up to a burst of them
// saved up while nobody asks. Waiters are served in the order they came:
// the first in line waits on the clock for the next token, the others wait
// for their turn, so a token costs one wake-up whatever the queue's length.
//
// Wait, SetRate and Rate may be called concurrently from any goroutine.
type Bucket struct {
	clock Clock

	mu     sync.Mutex
	rate   float64 // tokens per second; 0 hands out none
	burst  float64
	tokens float64
	last   time.Time       // when tokens was computed
	queue  []chan struct{} // waiters in order; the first is told it leads
	// changed is closed (and replaced) when the rate changes, so that the
	// leading waiter computes its wait again.
	changed chan struct{}
}

// New returns a full bucket of burst tokens (at least 1) refilled at rate
// per second. A rate of 0 hands out nothing until SetRate.
func New(c Clock, rate float64, burst int) *Bucket {
	b := &Bucket{clock: c, rate: max(rate, 0), burst: float64(max(burst, 1)), changed: make(chan struct{})}
	b.tokens, b.last = b.burst, c.Now()
	return b
}

// Rate is the current rate, per second.
func (b *Bucket) Rate() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rate
}

// Waiting is how many wait in line for a token.
func (b *Bucket) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// SetRate changes the rate from now on; the tokens saved so far are kept.
func (b *Bucket) SetRate(rate float64) { b.SetLimit(rate, int(b.burst)) }

// SetLimit changes the rate and the burst from now on; the tokens saved so
// far are kept, up to the new burst (at least 1).
func (b *Bucket) SetLimit(rate float64, burst int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	b.rate, b.burst = max(rate, 0), float64(max(burst, 1))
	b.tokens = min(b.tokens, b.burst)
	close(b.changed)
	b.changed = make(chan struct{})
}

// refill adds the tokens earned since last. Called with mu held.
func (b *Bucket) refill() {
	now := b.clock.Now()
	if d := now.Sub(b.last); d > 0 {
		b.tokens = math.Min(b.burst, b.tokens+d.Seconds()*b.rate)
	}
	b.last = now
}

// Allow takes a token if one is there and nobody waits for it, without
// waiting: a server that refuses what exceeds its rate uses it.
func (b *Bucket) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	if len(b.queue) == 0 && b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// Wait takes a token, waiting for it in line; it returns ctx's error if ctx
// ends first (and takes no token then).
func (b *Bucket) Wait(ctx context.Context) error {
	b.mu.Lock()
	b.refill()
	if len(b.queue) == 0 && b.tokens >= 1 {
		b.tokens--
		b.mu.Unlock()
		return nil
	}
	turn := make(chan struct{}, 1)
	b.queue = append(b.queue, turn)
	if len(b.queue) == 1 {
		turn <- struct{}{}
	}
	b.mu.Unlock()

	select {
	case <-turn:
	case <-ctx.Done():
		b.leave(turn)
		return ctx.Err()
	}
	for { // first in line
		b.mu.Lock()
		b.refill()
		if b.tokens >= 1 {
			b.tokens--
			b.queue = b.queue[1:]
			b.lead()
			b.mu.Unlock()
			return nil
		}
		var next <-chan time.Time // nil with a rate of 0: wait for a change
		if b.rate > 0 {
			next = b.clock.After(time.Duration(math.Ceil((1 - b.tokens) / b.rate * float64(time.Second))))
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-next:
		case <-changed:
		case <-ctx.Done():
			b.leave(turn)
			return ctx.Err()
		}
	}
}

// lead tells the first waiter that it leads. Called with mu held.
func (b *Bucket) lead() {
	if len(b.queue) > 0 {
		select {
		case b.queue[0] <- struct{}{}:
		default:
		}
	}
	if len(b.queue) == 0 && cap(b.queue) > 1024 {
		b.queue = nil // give a long queue's array back
	}
}

// leave takes a waiter out of line; if it led, the next one leads.
func (b *Bucket) leave(turn chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, w := range b.queue {
		if w == turn {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			if i == 0 {
				b.lead()
			}
			return
		}
	}
}
