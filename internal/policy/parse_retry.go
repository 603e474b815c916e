package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Retry rules: "none" (no retries), or a mapping of the outcomes retried
// (RetriedOutcomes: busy, no-answer, failed, machine), each with its
// backoff, and of two bounds:
//
//	retry:
//	  max_attempts: 3      # 1 to MaxAttempts, the first attempt included
//	  max_age: 1d          # from the first attempt's requested time
//	  busy: {delay: 5m, max_delay: 2h, jitter: 0.2}
//
// A backoff's delay is required; max_delay (default DefaultMaxDelay, or the
// delay if longer) is not shorter than it; both are 1 s to MaxRetryDelay.
// jitter is a fraction of the delay from 0 to MaxJitter (default
// DefaultJitter). A mapping that retries no outcome is an error: "none"
// says that.

// backoffForm is the form of a backoff, as problems show it.
const backoffForm = `{delay: DURATION, max_delay: DURATION, jitter: 0 to 0.9}`

// retry reads the retry rules: "none", or the outcomes retried with their
// backoff, max_attempts (default DefaultMaxAttempts) and max_age (longer
// than 0, at most MaxRetryAge; default DefaultMaxAge). It returns nil when n
// is not a mapping (reported).
func (ps *parser) retry(path string, n *yaml.Node) *Retry {
	n = deref(n)
	if n != nil && n.Kind == yaml.ScalarNode && n.Value == "none" {
		return &Retry{}
	}
	r := &Retry{Outcomes: map[string]Backoff{}, MaxAttempts: DefaultMaxAttempts, MaxAge: DefaultMaxAge}
	handlers := map[string]func(string, *yaml.Node){
		"max_attempts": func(path string, v *yaml.Node) {
			k, ok := ps.wholeNumber(path, v, 1, MaxAttempts, "attempts", fmt.Sprintf("a whole number from 1 to %d, the first attempt included", MaxAttempts))
			if !ok {
				return
			}
			r.MaxAttempts = k
		},
		"max_age": func(path string, v *yaml.Node) {
			d, ok := ps.duration(path, v)
			switch {
			case !ok:
			case d <= 0 || d > MaxRetryAge:
				ps.fail(path, v, "%s is out of range; accepted: longer than 0 and at most %s", formatDuration(d), formatDuration(MaxRetryAge))
			default:
				r.MaxAge = d
			}
		},
	}
	for _, o := range RetriedOutcomes {
		handlers[o] = func(path string, v *yaml.Node) {
			if b, ok := ps.backoff(path, v); ok {
				r.Outcomes[o] = b
			}
		}
	}
	if !ps.fields(path, n, `"none" or a mapping of the outcomes retried (busy, no-answer, failed, machine) with max_attempts and max_age`, handlers) {
		return nil
	}
	if len(r.Outcomes) == 0 && !ps.reported(path) {
		ps.fail(path, n, "retries no outcome; list at least one of %s with %s, or write none", strings.Join(RetriedOutcomes, ", "), backoffForm)
	}
	return r
}

// retryDelay reads a retry delay (1 s to MaxRetryDelay); anything else is
// an error of the field at path, and def is kept.
func (ps *parser) retryDelay(path string, v *yaml.Node, def time.Duration) (time.Duration, bool) {
	d, ok := ps.duration(path, v)
	switch {
	case !ok:
		return def, false
	case d < time.Second || d > MaxRetryDelay:
		ps.fail(path, v, "%s is out of range; accepted: 1s to %s", formatDuration(d), formatDuration(MaxRetryDelay))
		return def, false
	}
	return d, true
}

// backoff reads one outcome's backoff (see above). false (a problem was
// reported) leaves the outcome out of the rules, so that the checks after
// it do not report it again.
func (ps *parser) backoff(path string, n *yaml.Node) (Backoff, bool) {
	b := Backoff{MaxDelay: DefaultMaxDelay, Jitter: DefaultJitter}
	var haveDelay, haveMax bool
	good := ps.fields(path, n, "a mapping "+backoffForm, map[string]func(string, *yaml.Node){
		"delay":     func(path string, v *yaml.Node) { b.Delay, haveDelay = ps.retryDelay(path, v, b.Delay) },
		"max_delay": func(path string, v *yaml.Node) { b.MaxDelay, haveMax = ps.retryDelay(path, v, b.MaxDelay) },
		"jitter": func(path string, v *yaml.Node) {
			v = deref(v)
			f, err := 0.0, error(nil)
			if v != nil && v.Kind == yaml.ScalarNode && (v.Tag == "!!float" || v.Tag == "!!int") {
				f, err = strconv.ParseFloat(v.Value, 64)
			} else {
				err = errors.New("not a number")
			}
			if err != nil || !(f >= 0 && f <= MaxJitter) { // NaN too
				ps.fail(path, v, "%s is not a jitter; accepted: a fraction from 0 to %g of the delay", describe(v), MaxJitter)
				return
			}
			b.Jitter = f
		},
	})
	if !good {
		return b, false
	}
	ps.required(path, n, "delay", haveDelay)
	if !haveDelay {
		return b, false
	}
	switch {
	case !haveMax:
		b.MaxDelay = max(b.MaxDelay, b.Delay)
	case b.MaxDelay < b.Delay:
		ps.fail(join(path, "max_delay"), n, "%s is shorter than delay %s", formatDuration(b.MaxDelay), formatDuration(b.Delay))
		return b, false
	}
	return b, true
}
