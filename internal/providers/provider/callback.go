package provider

import (
	"context"
	"log/slog"
	"net/http"
	"time"
)

// CallbackEndpoint is what the providers' status callback endpoints share
// once a request is verified or refused: where the status goes, the clock,
// the log and the counts. Its methods are safe for concurrent use.
type CallbackEndpoint struct {
	Sink StatusSink
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	Stats  CallbackStats

	published repeats
}

// Time is the endpoint's clock's time.
func (e *CallbackEndpoint) Time() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *CallbackEndpoint) log() *slog.Logger {
	if e.Logger != nil {
		return e.Logger
	}
	return slog.Default()
}

// Refuse answers 403 to a request that is unsigned, badly signed or stale,
// counts it and logs it with the running count.
func (e *CallbackEndpoint) Refuse(w http.ResponseWriter, r *http.Request, why string) {
	n := e.Stats.Rejected.Add(1)
	e.log().Warn("status callback refused", "endpoint", r.URL.Path, "remote", r.RemoteAddr, "why", why, "refused_total", n)
	http.Error(w, why, http.StatusForbidden)
}

// Invalid answers 400 to a signed request that does not read, and counts it.
func (e *CallbackEndpoint) Invalid(w http.ResponseWriter, want string) {
	e.Stats.Invalid.Add(1)
	http.Error(w, want, http.StatusBadRequest)
}

// Publish hands a verified status to the sink, its detail masked (Text),
// and answers 204 once it is stored, or 503 (send it again) if it was not.
// The same status (call, outcome, final) published within RepeatWindow is
// answered 204 and counted, not published again: a signed request replayed
// while its signature is fresh, or a provider's retry.
func (e *CallbackEndpoint) Publish(w http.ResponseWriter, r *http.Request, s Status) {
	if err := e.Store(r.Context(), s); err != nil {
		http.Error(w, "not stored, send it again", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Store is Publish without the answer: nil once s is stored (or was
// within RepeatWindow), else the sink's error, logged and counted. An
// endpoint whose answer says more than 204 (Twilio's Gather wants TwiML)
// writes it after a nil.
func (e *CallbackEndpoint) Store(ctx context.Context, s Status) error {
	s.Detail = Text(s.Detail)
	key := repeatKey(s)
	if !e.published.add(key, e.Time()) {
		e.Stats.Repeated.Add(1)
		return nil
	}
	if err := e.Sink.Publish(ctx, s); err != nil {
		e.published.remove(key)
		e.Stats.Failed.Add(1)
		e.log().Error("status callback not published", "call_id", s.CallID, "err", err)
		return err
	}
	e.Stats.Accepted.Add(1)
	return nil
}
