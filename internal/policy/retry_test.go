package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/clock"
)

const retryDoc = `
default:
  retry:
    max_attempts: 5
    max_age: 1d
    no-answer: {delay: 10m, max_delay: 1h, jitter: 0.2}
    busy: {delay: 2m, jitter: 0}
campaigns:
  quiet:
    retry: none
  persistent:
    retry: {max_attempts: 10, max_age: 7d, machine: {delay: 1h}}
`

// The delay doubles from one attempt to the next up to max_delay, and the
// jitter only shortens it, by at most its fraction; each outcome has its
// own backoff, and an outcome not listed is not retried. Times come from a
// fake clock, as the dialer's outcome times do.
func TestRetryDelayGrowthAndJitter(t *testing.T) {
	p := mustParse(t, retryDoc)
	r := p.RetryFor("")
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	first := clk.Now()
	for n := 1; n < 5; n++ {
		base := min(10*time.Minute<<(n-1), time.Hour)
		lo, hi := base-base/5, base
		var shortest, longest time.Duration = hi, lo
		for i := range 500 {
			clk.Advance(time.Second)
			ended := clk.Now()
			at, stop := r.Next(Ended{Outcome: "no-answer", Attempt: n, CallID: fmt.Sprintf("call-%d-%d", n, i), At: ended, First: first})
			if stop != StopNone {
				t.Fatalf("attempt %d: stop %v", n, stop)
			}
			d := at.Sub(ended)
			if d < lo || d > hi {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", n, d, lo, hi)
			}
			shortest, longest = min(shortest, d), max(longest, d)
		}
		// The jitter spreads the delays over most of its range.
		if longest-shortest < (hi-lo)*8/10 {
			t.Errorf("attempt %d: delays %v to %v, want most of [%v, %v]", n, shortest, longest, lo, hi)
		}
	}
	// The same call gets the same time: a replay computes the same retry.
	a, _ := r.Next(Ended{Outcome: "no-answer", Attempt: 2, CallID: "c", At: clk.Now(), First: first})
	b, _ := r.Next(Ended{Outcome: "no-answer", Attempt: 2, CallID: "c", At: clk.Now(), First: first})
	if !a.Equal(b) {
		t.Fatalf("same call, two times: %v %v", a, b)
	}
	// busy: its own delay, no jitter; doubling.
	for n, want := range map[int]time.Duration{1: 2 * time.Minute, 2: 4 * time.Minute, 3: 8 * time.Minute} {
		at, stop := r.Next(Ended{Outcome: "busy", Attempt: n, CallID: "b", At: clk.Now(), First: first})
		if stop != StopNone || at.Sub(clk.Now()) != want {
			t.Errorf("busy after attempt %d: %v %v, want %v", n, at.Sub(clk.Now()), stop, want)
		}
	}
	for _, o := range []string{"failed", "machine", "answered", "canceled", ""} {
		if _, stop := r.Next(Ended{Outcome: o, Attempt: 1, CallID: "x", At: clk.Now(), First: first}); stop != StopNotRetried {
			t.Errorf("%q: stop %v, want not_retried", o, stop)
		}
	}
	if _, stop := p.RetryFor("quiet").Next(Ended{Outcome: "no-answer", Attempt: 1, At: clk.Now(), First: first}); stop != StopNotRetried {
		t.Errorf("campaign with retry: none: %v", stop)
	}
	// A campaign's retry replaces the default's whole.
	pr := p.RetryFor("persistent")
	if _, stop := pr.Next(Ended{Outcome: "no-answer", Attempt: 1, At: clk.Now(), First: first}); stop != StopNotRetried {
		t.Errorf("persistent retries no-answer: %v", stop)
	}
	if at, stop := pr.Next(Ended{Outcome: "machine", Attempt: 1, CallID: "m", At: clk.Now(), First: first}); stop != StopNone || at.Sub(clk.Now()) > time.Hour || at.Sub(clk.Now()) < 48*time.Minute {
		t.Errorf("persistent machine: %v %v", at.Sub(clk.Now()), stop)
	}
	if !p.Retries() || mustParse(t, "{}").Retries() || mustParse(t, "default: {retry: none}").Retries() {
		t.Error("Retries")
	}
	if !mustParse(t, "default: {retry: none}\ncampaigns: {c: {retry: {busy: {delay: 1m}}}}").Retries() {
		t.Error("a campaign's retries do not count")
	}
}

// max_attempts counts the first attempt: with 5, the fifth attempt's
// outcome ends the follow-up. max_age counts from the first attempt's
// requested time, whatever the attempt.
func TestRetryMaxAttemptsAndMaxAge(t *testing.T) {
	r := mustParse(t, retryDoc).RetryFor("")
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	first := clk.Now()
	for n := 1; n <= 5; n++ {
		_, stop := r.Next(Ended{Outcome: "busy", Attempt: n, CallID: "b", At: clk.Now(), First: first})
		if want := map[bool]Stop{true: StopMaxAttempts, false: StopNone}[n == 5]; stop != want {
			t.Errorf("after attempt %d: %v, want %v", n, stop, want)
		}
	}
	// 23h58m after the first: a 2 min retry is just within the day.
	clk.Set(first.Add(24*time.Hour - 2*time.Minute))
	if at, stop := r.Next(Ended{Outcome: "busy", Attempt: 1, At: clk.Now(), First: first}); stop != StopNone || !at.Equal(first.Add(24*time.Hour)) {
		t.Errorf("retry at the max age: %v %v", at, stop)
	}
	clk.Advance(time.Second)
	if _, stop := r.Next(Ended{Outcome: "busy", Attempt: 1, At: clk.Now(), First: first}); stop != StopMaxAge {
		t.Errorf("retry a second past the max age: %v", stop)
	}
	if r.TooOld(first, first.Add(24*time.Hour)) || !r.TooOld(first, first.Add(24*time.Hour+time.Nanosecond)) {
		t.Error("TooOld")
	}
}

// Defaults of left-out fields, the canonical encoding, and a policy
// without retries keeping the version it had before retry rules existed.
func TestRetryDefaultsAndEncoding(t *testing.T) {
	p := mustParse(t, "default: {retry: {no-answer: {delay: 10m}}}")
	r := p.RetryFor("")
	b := r.Outcomes["no-answer"]
	if r.MaxAttempts != DefaultMaxAttempts || r.MaxAge != DefaultMaxAge || b.MaxDelay != DefaultMaxDelay || b.Jitter != DefaultJitter {
		t.Errorf("defaults: %+v %+v", r, b)
	}
	enc := string(p.Encode())
	if !strings.Contains(enc, `"retry":{"max_age":"1d","max_attempts":3,"no-answer":{"delay":"10m","jitter":0.2,"max_delay":"1d"}}`) {
		t.Errorf("encoding %s", enc)
	}
	back := mustParse(t, enc)
	if back.Version() != p.Version() {
		t.Errorf("round trip changed the version: %s", back.Encode())
	}
	q := mustParse(t, retryDoc)
	if back := mustParse(t, string(q.Encode())); back.Version() != q.Version() {
		t.Errorf("round trip changed the version:\n%s\n%s", q.Encode(), back.Encode())
	}
	// Written before retries existed: the empty policy's encoding.
	if got := string(mustParse(t, "{}").Encode()); strings.Contains(got, "retry") {
		t.Errorf("a policy without retries writes them: %s", got)
	}
	if mustParse(t, "{}").Version() != mustParse(t, "default: {retry: none}").Version() {
		t.Error("retry: none changes the version")
	}
}

// Every bad field of the retry rules is named, with what it accepts.
func TestRetryParseErrors(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"default: {retry: {no-answer: {delay: 10m}, sometimes: 1}}", "default.retry.sometimes (line 1): unknown field; default.retry accepts busy, failed, machine, max_age, max_attempts, no-answer"},
		{"default: {retry: {no_answer: {delay: 10m}}}", "default.retry.no_answer (line 1): unknown field"},
		{"default: {retry: {max_attempts: 3}}", "default.retry (line 1): retries no outcome; list at least one of busy, no-answer, failed, machine"},
		{"default: {retry: {busy: {delay: 10m, wait: 1s}}}", "default.retry.busy.wait (line 1): unknown field; default.retry.busy accepts delay, jitter, max_delay"},
		{"default: {retry: {busy: {jitter: 0.1}}}", "default.retry.busy.delay (line 1): is required"},
		{"default: {retry: {busy: {delay: 0s}}}", "default.retry.busy.delay (line 1): 0s is out of range; accepted: 1s to 30d"},
		{"default: {retry: {busy: {delay: 1h, max_delay: 10m}}}", "default.retry.busy.max_delay (line 1): 10m is shorter than delay 1h"},
		{"default: {retry: {busy: {delay: 1h, jitter: 1.5}}}", `default.retry.busy.jitter (line 1): "1.5" is not a jitter; accepted: a fraction from 0 to 0.9 of the delay`},
		{"default: {retry: {busy: {delay: 1h, jitter: .nan}}}", `default.retry.busy.jitter (line 1): ".nan" is not a jitter`},
		{"default: {retry: {busy: {delay: 1h}, max_attempts: 0}}", `default.retry.max_attempts (line 1): "0" is not a number of attempts; accepted: a whole number from 1 to 100`},
		{"default: {retry: {busy: {delay: 1h}, max_age: 400d}}", "default.retry.max_age (line 1): 400d is out of range; accepted: longer than 0 and at most 366d"},
		{"default: {retry: always}", `default.retry (line 1): must be "none" or a mapping of the outcomes retried`},
		{"campaigns: {c: {retry: {busy: {delay: x}}}}", `campaigns.c.retry.busy.delay (line 1): "x" is not a duration`},
	} {
		_, err := Parse([]byte(c.doc))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant %s", c.doc, err, c.want)
		}
	}
}
