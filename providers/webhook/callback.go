package webhook

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/providers"
)

// CallbackPath is where ivrsched's web server takes the webhook endpoint's
// status callbacks.
const CallbackPath = "/callbacks/webhook"

// Callback is the status callback endpoint of the webhook provider.
//
// The endpoint POSTs JSON: {"call_id": "...", "user_id": "...", "outcome":
// "no_answer", "final": true, "detail": "...", "provider_call_id": "..."},
// signed like the calls (X-Ivrsched-Signature over the body, with the same
// secret). "final" may be left out: every outcome but placed, ringing and
// answered is final then. A request without a valid signature no older
// than MaxAge gets 403 and is counted; a signed one that does not read gets
// 400; a verified status is published (StatusSink) before the answer, 204.
//
// ServeHTTP is safe for concurrent use.
type Callback struct {
	Secret []byte
	Sink   providers.StatusSink
	// MaxAge bounds a signature's age (and clock skew); 0 means 5 minutes.
	MaxAge time.Duration
	// Now is the clock; nil means time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	Stats  providers.CallbackStats
}

type statusBody struct {
	CallID         string `json:"call_id"`
	UserID         string `json:"user_id"`
	Outcome        string `json:"outcome"`
	Final          *bool  `json:"final"`
	Detail         string `json:"detail"`
	ProviderCallID string `json:"provider_call_id"`
}

func (c *Callback) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	log := c.Logger
	if log == nil {
		log = slog.Default()
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST a signed status", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	maxAge := c.MaxAge
	if maxAge <= 0 {
		maxAge = 5 * time.Minute
	}
	if len(c.Secret) == 0 {
		c.Stats.Rejected.Add(1)
		http.Error(w, "no secret configured: status callbacks are refused", http.StatusForbidden)
		return
	}
	if err := Verify(c.Secret, r.Header.Get(SignatureHeader), body, now(), maxAge); err != nil {
		n := c.Stats.Rejected.Add(1)
		log.Warn("status callback refused", "endpoint", CallbackPath, "remote", r.RemoteAddr, "err", err, "refused_total", n)
		http.Error(w, "invalid or stale signature", http.StatusForbidden)
		return
	}
	var s statusBody
	outcome, ok := pb.Outcome(0), false
	if json.Unmarshal(body, &s) == nil {
		outcome, ok = providers.ParseOutcome(s.Outcome)
	}
	if !ok || s.CallID == "" || s.UserID == "" {
		c.Stats.Invalid.Add(1)
		http.Error(w, `want {"call_id", "user_id", "outcome"} with an outcome like "no_answer"`, http.StatusBadRequest)
		return
	}
	st := providers.Status{CallID: s.CallID, UserID: s.UserID, Outcome: outcome, Final: providers.IsFinal(outcome),
		Detail: s.Detail, ProviderCallID: s.ProviderCallID, At: now()}
	if s.Final != nil {
		st.Final = *s.Final
	}
	if err := c.Sink.Publish(r.Context(), st); err != nil {
		c.Stats.Failed.Add(1)
		log.Error("status callback not published", "call_id", s.CallID, "err", err)
		http.Error(w, "not stored, send again", http.StatusServiceUnavailable)
		return
	}
	c.Stats.Accepted.Add(1)
	w.WriteHeader(http.StatusNoContent)
}
