package admin

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ivrsched/ivrsched/internal/clock"
)

// LatenessRecorder keeps the fire lateness of the last hour per minute, as
// counts per LatenessBounds bucket: 61 minutes × the buckets, a fixed
// 25 KiB. It observes beside the Prometheus histogram
// (scheduler.Config.Lateness); an observation costs a clock read, a
// binary search over the bounds and an atomic add (a lock once a minute,
// to clear the minute's slot from an hour ago); ObserveAt, given the fire's
// clock reading, reads no clock.
type LatenessRecorder struct {
	clock clock.Clock
	mu    sync.Mutex // clears a slot
	slots [61]latenessSlot
}

type latenessSlot struct {
	minute atomic.Int64 // unix minute the counts are of
	counts []atomic.Uint64
}

// NewLatenessRecorder returns a recorder that reads the minute from clk
// (nil: the real clock).
func NewLatenessRecorder(clk clock.Clock) *LatenessRecorder {
	if clk == nil {
		clk = clock.Real{}
	}
	r := &LatenessRecorder{clock: clk}
	for i := range r.slots {
		r.slots[i].counts = make([]atomic.Uint64, len(LatenessBounds))
		r.slots[i].minute.Store(-1)
	}
	return r
}

// Observe records a lateness in seconds in the current minute by the
// recorder's clock.
func (r *LatenessRecorder) Observe(seconds float64) { r.ObserveAt(seconds, r.clock.Now()) }

// ObserveAt records a lateness in seconds in the minute of at (the fire's
// clock reading: no clock is read here).
func (r *LatenessRecorder) ObserveAt(seconds float64, at time.Time) {
	m := at.Unix() / 60
	s := &r.slots[m%int64(len(r.slots))]
	if s.minute.Load() != m {
		r.mu.Lock()
		if s.minute.Load() != m {
			for i := range s.counts {
				s.counts[i].Store(0)
			}
			s.minute.Store(m)
		}
		r.mu.Unlock()
	}
	s.counts[bucket(seconds)].Add(1)
}

// bucket is the index of the first of LatenessBounds at or above v.
func bucket(v float64) int {
	lo, hi := 0, len(LatenessBounds)-1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if LatenessBounds[mid] < v {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Series returns the last 60 minutes, the current one last, with their
// bucket counts and quantiles.
func (r *LatenessRecorder) Series() LatenessSeries {
	now := r.clock.Now().Unix() / 60
	out := LatenessSeries{Bounds: LatenessBounds, Minutes: make([]LatenessMinute, 0, 60)}
	for m := now - 59; m <= now; m++ {
		lm := LatenessMinute{Minute: time.Unix(m*60, 0).UTC(), Buckets: make([]uint64, len(LatenessBounds))}
		s := &r.slots[m%int64(len(r.slots))]
		if s.minute.Load() == m {
			for i := range s.counts {
				lm.Buckets[i] = s.counts[i].Load()
			}
		}
		out.Minutes = append(out.Minutes, lm)
	}
	Summarize(out.Minutes)
	return out
}
