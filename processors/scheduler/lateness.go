package scheduler

import "time"

// TimedObserver is an Observer that also takes the clock reading of the
// fire it observes, so that it need not read a clock itself on the firing
// path (the web page's per-minute lateness, admin.LatenessRecorder).
type TimedObserver interface {
	ObserveAt(seconds float64, at time.Time)
}

// observeLateness observes a fire's lateness, in seconds, at now.
func (s *Scheduler) observeLateness(now time.Time, seconds float64) {
	switch o := s.cfg.Lateness.(type) {
	case nil:
	case TimedObserver:
		o.ObserveAt(seconds, now)
	default:
		o.Observe(seconds)
	}
}
