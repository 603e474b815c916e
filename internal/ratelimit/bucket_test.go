package ratelimit

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/clock"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// taker takes tokens in the background and reports when each was taken.
type taker struct {
	got chan time.Time
	clk *clock.Fake
}

func take(clk *clock.Fake, b *Bucket, n int) *taker {
	tk := &taker{got: make(chan time.Time, n), clk: clk}
	for range n {
		go func() {
			if err := b.Wait(context.Background()); err == nil {
				tk.got <- clk.Now()
			}
		}()
	}
	return tk
}

func (tk *taker) none(t *testing.T) {
	t.Helper()
	select {
	case at := <-tk.got:
		t.Fatalf("a token at %v, want none yet", at.Sub(t0))
	default:
	}
}

func TestBurstThenPaced(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(clk, 10, 3) // 10/s: one token per 100 ms
	for i := range 3 {
		if err := b.Wait(context.Background()); err != nil {
			t.Fatalf("burst token %d: %v", i, err)
		}
	}
	tk := take(clk, b, 2)
	clk.BlockUntil(1) // the first in line waits on the clock; the second waits its turn
	tk.none(t)
	clk.Advance(99 * time.Millisecond)
	tk.none(t)
	clk.Advance(time.Millisecond)
	if at := <-tk.got; !at.Equal(t0.Add(100 * time.Millisecond)) {
		t.Fatalf("token at %v, want 100ms", at.Sub(t0))
	}
	clk.BlockUntil(1)
	tk.none(t)
	clk.Advance(100 * time.Millisecond)
	if at := <-tk.got; !at.Equal(t0.Add(200 * time.Millisecond)) {
		t.Fatalf("token at %v, want 200ms", at.Sub(t0))
	}
}

// A second of fake time hands out rate tokens (plus the burst), however
// many wait.
func TestRateHoldsUnderContention(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(clk, 50, 1)
	tk := take(clk, b, 200)
	<-tk.got // the one saved token
	for i := 1; i <= 50; i++ {
		clk.BlockUntil(1)
		clk.Advance(20 * time.Millisecond)
		if at := <-tk.got; !at.Equal(t0.Add(time.Duration(i) * 20 * time.Millisecond)) {
			t.Fatalf("token %d at %v", i, at.Sub(t0))
		}
	}
	tk.none(t)
}

func TestSavesNoMoreThanBurst(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(clk, 10, 2)
	clk.Advance(time.Hour)
	for range 2 {
		if err := b.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	tk := take(clk, b, 1)
	clk.BlockUntil(1)
	tk.none(t)
}

func TestSetRateWakesTheLine(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(clk, 0, 1)
	if err := b.Wait(context.Background()); err != nil { // the full bucket's token
		t.Fatal(err)
	}
	tk := take(clk, b, 1)
	// Rate 0: the leader waits for a change, not on the clock.
	clk.Advance(time.Hour)
	tk.none(t)
	b.SetRate(4) // 250 ms per token, counted from now
	clk.BlockUntil(1)
	clk.Advance(250 * time.Millisecond)
	<-tk.got

	// Slower while waiting: the new rate applies to the token waited for.
	tk = take(clk, b, 1)
	clk.BlockUntil(1)
	b.SetRate(1)
	clk.BlockUntil(2) // the leader waits again (its first timer is still pending)
	clk.Advance(250 * time.Millisecond)
	tk.none(t)
	clk.Advance(750 * time.Millisecond)
	<-tk.got
	if b.Rate() != 1 {
		t.Fatalf("rate %v", b.Rate())
	}
}

func TestCancelledWaiterLeavesTheLine(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(clk, 10, 1)
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.Wait(ctx) }()
	clk.BlockUntil(1) // it leads
	tk := take(clk, b, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
	// The next in line leads and gets the token the cancelled one did not take.
	clk.BlockUntil(2)
	clk.Advance(100 * time.Millisecond)
	if at := <-tk.got; !at.Equal(t0.Add(100 * time.Millisecond)) {
		t.Fatalf("token at %v", at.Sub(t0))
	}
}

func TestOrderIsFirstComeFirstServed(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(clk, 10, 1)
	if err := b.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			if b.Wait(context.Background()) == nil {
				order <- i
			}
		}()
		for b.Waiting() < i+1 { // the next one comes after this one is in line
			runtime.Gosched()
		}
	}
	for want := range 3 {
		clk.BlockUntil(1)
		clk.Advance(100 * time.Millisecond)
		if got := <-order; got != want {
			t.Fatalf("token %d went to waiter %d", want, got)
		}
	}
}

func TestAllowNeverWaits(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(clk, 2, 2)
	if !b.Allow() || !b.Allow() || b.Allow() {
		t.Fatal("want the burst of 2, then a refusal")
	}
	clk.Advance(499 * time.Millisecond)
	if b.Allow() {
		t.Fatal("a token before 500ms")
	}
	clk.Advance(time.Millisecond)
	if !b.Allow() {
		t.Fatal("no token after 500ms")
	}
}

func TestSetLimitKeepsTokensUpToTheNewBurst(t *testing.T) {
	clk := clock.NewFake(t0)
	b := New(clk, 10, 5)
	b.SetLimit(20, 2)
	if !b.Allow() || !b.Allow() || b.Allow() {
		t.Fatal("want the 2 tokens the new burst keeps")
	}
	clk.Advance(50 * time.Millisecond) // 20/s: one token per 50 ms
	if !b.Allow() || b.Allow() {
		t.Fatal("want one token after 50ms at the new rate")
	}
}
