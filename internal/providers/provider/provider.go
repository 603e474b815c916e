// Package provider is what the dialer places calls through: the Provider
// interface, the answer a provider gives, the errors that say a request may
// be sent again, and the statuses a provider reports later through a status
// callback. The adapters are its siblings (internal/providers/webhook and
// internal/providers/twilio), which import it; Log is the default provider.
package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/redact"
)

// Provider places phone calls.
//
// Place is called concurrently from the dialer's placement workers, up to
// --max-in-flight at a time; it must return when ctx ends. call.CallId is
// an idempotency key: a provider that receives the same call id twice must
// place the call at most once (see each adapter for how it passes it on).
//
// An error that wraps a *RetryableError (429, 5xx, the request did not get
// through) is retried with the same call id within the call's deadline;
// any other error fails the call.
type Provider interface {
	Place(ctx context.Context, call *pb.IVRCall) (Result, error)
}

// Result is a provider's answer to placing a call.
type Result struct {
	Outcome pb.Outcome
	// Final says no status callback will follow: Outcome is the call's
	// final outcome.
	Final  bool
	Detail string
	// ProviderCallID is the provider's id of the call (Twilio's CallSid).
	ProviderCallID string
}

// RetryableError is a provider's refusal for now: the same request may be
// sent again, with the same idempotency key, after RetryAfter (0: the
// dialer's backoff decides).
type RetryableError struct {
	Status     int // the HTTP status, 0 when the request got no answer
	RetryAfter time.Duration
	Err        error
}

func (e *RetryableError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("status %d (retryable): %v", e.Status, e.Err)
	}
	return fmt.Sprintf("retryable: %v", e.Err)
}

func (e *RetryableError) Unwrap() error { return e.Err }

// AsRetryable returns the *RetryableError err wraps, if any.
func AsRetryable(err error) (*RetryableError, bool) {
	var re *RetryableError
	ok := errors.As(err, &re)
	return re, ok
}

// StatusError classifies a non-2xx HTTP answer: 429 and 5xx are retryable
// (after the answer's Retry-After, if it has one), any other status fails
// the call. body is the start of the answer, for the message, with phone
// numbers masked (Text).
func StatusError(resp *http.Response, body []byte, now time.Time) error {
	msg := Text(string(body[:min(len(body), 300)]))
	err := fmt.Errorf("status %d: %s", resp.StatusCode, msg)
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		return &RetryableError{Status: resp.StatusCode, RetryAfter: RetryAfter(resp.Header.Get("Retry-After"), now), Err: errors.New(msg)}
	}
	return err
}

// Text is a provider's own text (an error's message, a status's detail)
// as ivrsched passes it on, to results, logs and pages: trimmed, with every
// phone number masked, since a provider may quote the number it refuses
// (Twilio's 400: "The 'To' number +1… is not a valid phone number").
func Text(s string) string { return redact.Text(strings.TrimSpace(s)) }

// RetryAfter parses an HTTP Retry-After value, seconds or an HTTP date; 0
// if absent or unreadable.
func RetryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if s, err := strconv.Atoi(h); err == nil {
		return time.Duration(max(s, 0)) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// HTTPClient returns a client for a provider's API that keeps up to
// maxConns connections open to it: with the default transport's 2 idle
// connections per host, hundreds of concurrent requests would open and
// close a connection each.
func HTTPClient(maxConns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = max(maxConns, 100)
	t.MaxIdleConnsPerHost = max(maxConns, 2)
	return &http.Client{Transport: t}
}

// Status is what a provider reported about a call after it was placed
// (a status callback), once its signature was verified.
type Status struct {
	CallID, UserID string
	Outcome        pb.Outcome
	// Final says this is the call's final outcome.
	Final          bool
	Detail         string
	ProviderCallID string
	At             time.Time
}

// StatusSink takes the statuses the callback endpoints verified.
//
// Publish is called concurrently from HTTP handlers. It returns once the
// status is stored (Kafka acknowledged it), so that an endpoint answers 2xx
// only for a status that will not be lost.
type StatusSink interface {
	Publish(ctx context.Context, s Status) error
}

// CallbackStats counts what a status callback endpoint did with its
// requests. Safe for concurrent use.
type CallbackStats struct {
	Accepted atomic.Int64 // verified and published
	Rejected atomic.Int64 // unsigned, badly signed or stale: 403
	Invalid  atomic.Int64 // signed but unreadable: 400
	Failed   atomic.Int64 // verified but not published (Kafka): 503
	Repeated atomic.Int64 // verified, already published: 204, not again
}

// IsFinal says whether an outcome reported without saying so ends a call:
// placed, ringing and answered (while the call goes on) do not.
func IsFinal(o pb.Outcome) bool {
	switch o {
	case pb.Outcome_OUTCOME_PLACED, pb.Outcome_OUTCOME_RINGING, pb.Outcome_OUTCOME_ANSWERED, pb.Outcome_OUTCOME_UNSPECIFIED:
		return false
	}
	return true
}

// Progress orders the outcomes that do not end a call as a call goes
// through them: placed (0), ringing (1), answered or machine (2). Status
// callbacks may arrive out of order (Twilio says so); one whose progress is
// below the status recorded for the call is older than it.
func Progress(o pb.Outcome) int {
	switch o {
	case pb.Outcome_OUTCOME_RINGING:
		return 1
	case pb.Outcome_OUTCOME_ANSWERED, pb.Outcome_OUTCOME_MACHINE:
		return 2
	}
	return 0
}

// ParseOutcome reads an Outcome name, with or without the OUTCOME_ prefix,
// in any case, with - or _ ("no-answer", "NO_ANSWER").
func ParseOutcome(s string) (pb.Outcome, bool) {
	s = strings.ToUpper(strings.ReplaceAll(strings.TrimSpace(s), "-", "_"))
	if s == "" {
		return 0, false
	}
	if !strings.HasPrefix(s, "OUTCOME_") {
		s = "OUTCOME_" + s
	}
	v, ok := pb.Outcome_value[s]
	return pb.Outcome(v), ok && v != 0
}

// Log places no call: it logs it and reports it placed, final. It is the
// default provider, for demos and dry runs.
type Log struct{ Logger *slog.Logger }

// Place logs the call.
func (p Log) Place(_ context.Context, c *pb.IVRCall) (Result, error) {
	l := p.Logger
	if l == nil {
		l = slog.Default()
	}
	res := Result{Outcome: pb.Outcome_OUTCOME_PLACED, Final: true}
	if !l.Enabled(context.Background(), slog.LevelInfo) {
		return res, nil // skip building the record
	}
	l.Info("call placed (log provider)", "call_id", c.GetCallId(), "user", c.GetUserId(), "task", c.GetTaskId(),
		"phone", redact.Phone(c.GetPhone()), "script", c.GetAction().GetIvrScript(), "due_at", c.GetDueAt().AsTime(),
		"lateness", c.GetFiredAt().AsTime().Sub(c.GetDueAt().AsTime()))
	return res, nil
}
