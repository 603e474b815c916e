package kafkaclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// sessions is a consumer group whose sessions end at once, each with the
// Cleanup error given for it (nil: a clean end), then with err, or, with
// none, when it cancels the context.
type sessions struct {
	sarama.ConsumerGroup
	cleanups []error
	err      error
	calls    int
	cancel   context.CancelFunc
}

func (s *sessions) Consume(ctx context.Context, _ []string, h sarama.ConsumerGroupHandler) error {
	s.calls++
	if s.calls <= len(s.cleanups) {
		_ = h.Cleanup(nil)
		return nil
	}
	if s.err != nil {
		return s.err
	}
	s.cancel()
	return nil
}

// handler is the processor's handler: its Cleanup fails as the session says.
type handler struct {
	sarama.ConsumerGroupHandler
	s *sessions
}

func (h handler) Cleanup(sarama.ConsumerGroupSession) error { return h.s.cleanups[h.s.calls-1] }

func TestRejoiningCallsConsumeAgain(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	boom := errors.New("broker gone")
	var paused []time.Duration
	s := &sessions{cleanups: make([]error, 3), err: boom, cancel: cancel}
	r := rejoining{ConsumerGroup: s, pause: func(_ context.Context, d time.Duration) { paused = append(paused, d) }}
	if err := r.Consume(ctx, []string{"t"}, handler{s: s}); !errors.Is(err, boom) {
		t.Fatalf("Consume = %v, want the session's error", err)
	}
	if s.calls != 4 {
		t.Fatalf("Consume called %d times, want 4 (three ended sessions, then the error)", s.calls)
	}
	// The sessions ended at once: each rejoin waited a short pause, no more.
	if len(paused) != 3 || paused[0] != rejoinPause || paused[2] != rejoinPause {
		t.Fatalf("pauses %v, want 3 of %v", paused, rejoinPause)
	}
}

// A session that ended because a partition failed is followed by a pause
// that grows while sessions keep failing.
func TestRejoiningBacksOffAfterFailedPartitions(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	failed := errors.New("partition 3 failed")
	var paused []time.Duration
	s := &sessions{cleanups: []error{failed, failed, failed, failed, failed, failed, nil}, cancel: cancel}
	r := rejoining{ConsumerGroup: s, pause: func(_ context.Context, d time.Duration) { paused = append(paused, d) }}
	if err := r.Consume(ctx, []string{"t"}, handler{s: s}); err != nil {
		t.Fatalf("Consume = %v, want nil once the context ends", err)
	}
	want := []time.Duration{failurePause, 2 * failurePause, 4 * failurePause, 8 * failurePause, maxFailurePause, maxFailurePause, rejoinPause}
	if len(paused) != len(want) {
		t.Fatalf("pauses %v, want %v", paused, want)
	}
	for i := range want {
		if paused[i] != want[i] {
			t.Fatalf("pauses %v, want %v", paused, want)
		}
	}
}

func TestRejoiningStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sessions{cleanups: make([]error, 2), cancel: cancel}
	r := rejoining{ConsumerGroup: s, pause: func(context.Context, time.Duration) {}}
	if err := r.Consume(ctx, []string{"t"}, handler{s: s}); err != nil {
		t.Fatalf("Consume = %v, want nil once the context ends", err)
	}
	if s.calls != 3 {
		t.Fatalf("Consume called %d times, want 3", s.calls)
	}
}
