package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// Limits of the retry rules.
const (
	// MaxRetryDelay bounds a retry's delay and max_delay.
	MaxRetryDelay = 30 * 24 * time.Hour
	// MaxRetryAge bounds max_age.
	MaxRetryAge = 366 * 24 * time.Hour
	// MaxAttempts bounds max_attempts (the first attempt included).
	MaxAttempts = 100
	// MaxJitter bounds the jitter fraction: a delay keeps at least a tenth
	// of its base.
	MaxJitter = 0.9
)

// The defaults of the retry rules' fields a document leaves out.
const (
	DefaultMaxAttempts = 3
	DefaultMaxAge      = 24 * time.Hour
	DefaultMaxDelay    = 24 * time.Hour
	DefaultJitter      = 0.2
)

// RetriedOutcomes are the call outcomes a retry rule may name, in the
// document's spelling.
var RetriedOutcomes = []string{"busy", "no-answer", "failed", "machine"}

// Retry are the rules that call a follow-up again when its call ended
// without an answer. A zero Retry (no outcome listed) retries nothing: the
// document's `retry: none`.
type Retry struct {
	// Outcomes holds the backoff of each outcome that is retried (keys
	// from RetriedOutcomes); an outcome not in it ends the follow-up.
	Outcomes map[string]Backoff
	// MaxAttempts counts the attempts in all, the first included.
	MaxAttempts int
	// MaxAge: no attempt is placed later than this after the first
	// attempt's requested time.
	MaxAge time.Duration
}

// Backoff is when an outcome is retried: the retry after attempt n waits
// Delay × 2^(n-1), at most MaxDelay, shortened by up to Jitter of it (a
// fraction drawn from the ended call's id, so every replay and every
// instance computes the same time).
type Backoff struct {
	Delay    time.Duration
	MaxDelay time.Duration
	Jitter   float64
}

// Enabled reports whether r retries any outcome.
func (r *Retry) Enabled() bool { return r != nil && len(r.Outcomes) > 0 }

// Ended is a call attempt of a follow-up that ended without an answer.
type Ended struct {
	// Outcome in the document's spelling (busy, no-answer, failed,
	// machine; any other is never retried).
	Outcome string
	// Attempt is the attempt that ended, from 1.
	Attempt int
	// CallID is the ended call's id: it draws the jitter.
	CallID string
	// At is when the call ended: the delay counts from it.
	At time.Time
	// First is the first attempt's requested time: max_age counts from it.
	First time.Time
}

// Stop says why a follow-up gets no further attempt.
type Stop int

// The reasons to stop. StopNone: another attempt.
const (
	StopNone        Stop = iota
	StopNotRetried       // the outcome is not retried (or the rules retry nothing)
	StopMaxAttempts      // the attempt that ended was the last allowed
	StopMaxAge           // the next attempt would be later than max_age after the first
)

// String is the reason as followup-events carries it.
func (s Stop) String() string {
	switch s {
	case StopNone:
		return "none"
	case StopNotRetried:
		return "not_retried"
	case StopMaxAttempts:
		return "max_attempts"
	case StopMaxAge:
		return "max_age"
	}
	return "unknown"
}

// Next is the requested time of the attempt after e, or why there is none.
// It is a pure function of the rules and e.
func (r *Retry) Next(e Ended) (time.Time, Stop) {
	if !r.Enabled() {
		return time.Time{}, StopNotRetried
	}
	b, ok := r.Outcomes[e.Outcome]
	switch {
	case !ok:
		return time.Time{}, StopNotRetried
	case e.Attempt >= r.MaxAttempts:
		return time.Time{}, StopMaxAttempts
	}
	at := e.At.Add(b.delay(e.Attempt, e.CallID))
	if r.TooOld(e.First, at) {
		return time.Time{}, StopMaxAge
	}
	return at, StopNone
}

// TooOld reports whether an attempt at `at` comes later than max_age after
// the first attempt's requested time (the scheduler asks again once the
// calling policy placed the retry).
func (r *Retry) TooOld(first, at time.Time) bool {
	return r.MaxAge > 0 && at.Sub(first) > r.MaxAge
}

// delay is the wait after attempt n (from 1) ended, for the call callID.
func (b Backoff) delay(n int, callID string) time.Duration {
	base := b.Delay
	for i := 1; i < n && base < b.MaxDelay; i++ {
		base *= 2
	}
	base = min(base, b.MaxDelay)
	return base - time.Duration(float64(base)*b.Jitter*unit(callID))
}

// unit draws a number in [0, 1) from s.
func unit(s string) float64 {
	sum := sha256.Sum256([]byte(s))
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}
