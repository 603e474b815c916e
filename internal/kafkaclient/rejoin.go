package kafkaclient

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// rejoining makes a consumer group join again as soon as a session ends
// cleanly, and after a growing pause when the session ended because a
// partition failed.
//
// Sarama ends a group session on every rebalance and when the group's
// coordinator is lost; Consume returns nil and must be called again to
// rejoin. Goka 1.1.16 then waits a fixed 5 s before it calls Consume again
// (Processor.rebalanceLoop), and while this member has not rejoined, the
// others' rebalance waits for it and no partition of the group is processed.
// Calling Consume again here, inside Goka's call, takes that pause out: Goka
// sees one long session.
//
// Goka's pause also spaced out the replays of a partition whose callback
// failed (ctx.Fail on the firing path: the input replays in the next
// session). That pause is kept, as a backoff: a session whose Cleanup
// reports a failed partition is followed by failurePause, doubling up to
// maxFailurePause while sessions keep failing. A session that ends at once
// without a failure (a coordinator still moving) is followed by a short
// pause, not a tight loop. An error from Consume still returns to Goka,
// which fails the processor.
type rejoining struct {
	sarama.ConsumerGroup
	pause func(context.Context, time.Duration)
}

const (
	briefSession    = time.Second
	rejoinPause     = 100 * time.Millisecond
	failurePause    = 500 * time.Millisecond
	maxFailurePause = 8 * time.Second
)

func (r rejoining) Consume(ctx context.Context, topics []string, h sarama.ConsumerGroupHandler) error {
	backoff := failurePause
	for {
		began := time.Now()
		w := &cleanupWatch{ConsumerGroupHandler: h}
		if err := r.ConsumerGroup.Consume(ctx, topics, w); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case w.failed.Load():
			r.pause(ctx, backoff)
			backoff = min(2*backoff, maxFailurePause)
		case time.Since(began) < briefSession:
			r.pause(ctx, rejoinPause)
		default:
			backoff = failurePause
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// cleanupWatch records whether a session's Cleanup reported an error: Goka
// returns one there when a partition processor failed.
type cleanupWatch struct {
	sarama.ConsumerGroupHandler
	failed atomic.Bool
}

func (w *cleanupWatch) Cleanup(s sarama.ConsumerGroupSession) error {
	err := w.ConsumerGroupHandler.Cleanup(s)
	if err != nil {
		w.failed.Store(true)
	}
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
