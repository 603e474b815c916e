package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/clock"
)

// pauseUntil runs r.pause on a fake clock, moving the clock to each wait's
// end as the pause starts it, and returns how much fake time the pause took.
func pauseUntil(t *testing.T, r *role, clk *clock.Fake, backoff time.Duration) (time.Duration, bool) {
	t.Helper()
	start := clk.Now()
	type result struct {
		down bool
		err  error
	}
	done := make(chan result, 1)
	go func() {
		down, err := r.pause(context.Background(), backoff)
		done <- result{down, err}
	}()
	for i := 0; i < 10000000; i++ {
		select {
		case res := <-done:
			if res.err != nil {
				t.Fatal(res.err)
			}
			return clk.Now().Sub(start), res.down
		default:
			if clk.Waiting() > 0 {
				clk.AdvanceToNext()
			}
			runtime.Gosched()
		}
	}
	t.Fatal("pause did not return")
	return 0, false
}

// A role whose brokers are down rebuilds within about probeEvery of their
// answering again, not at the end of a long backoff (a follow-up fired 22 s
// late after a 12 s outage when the role slept its backoff out).
func TestPauseResumesWhenBrokersAnswer(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	var probes atomic.Int32
	downUntil := clk.Now().Add(12 * time.Second)
	probe := func(context.Context) error {
		probes.Add(1)
		if clk.Now().Before(downUntil) {
			return errors.New("connection refused")
		}
		return nil
	}
	r := newRole("test", "t", slog.New(slog.NewTextHandler(io.Discard, nil)), clk, nil)
	r.probe = probe
	took, down := pauseUntil(t, r, clk, 30*time.Second)
	if !down || took < 12*time.Second || took > 12*time.Second+probeEvery {
		t.Fatalf("pause took %v (brokers down %v), want 12s to 12s+%v after an outage ending at 12s", took, down, probeEvery)
	}
	if n := probes.Load(); n > int32(12*time.Second/probeEvery)+2 {
		t.Fatalf("%d probes in 12s: more than one per %v", n, probeEvery)
	}

	// Brokers that answer: the processor's own fault, the backoff applies.
	downUntil = clk.Now()
	took, down = pauseUntil(t, r, clk, 8*time.Second)
	if down || took < 8*time.Second || took > 8*time.Second {
		t.Fatalf("pause took %v (brokers down %v), want the 8s backoff", took, down)
	}
}
