package webhook

import (
	"encoding/json"
	"io"
	"net/http"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
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
// answered is final then. "opted_out" (always final) says the recipient
// asked not to be called again: the dialer lists the number it placed the
// call to (a number in the body is not read). A request without a valid
// signature no older
// than MaxAge gets 403 and is counted; a signed one that does not read gets
// 400; a verified status is published (StatusSink) before the answer, 204.
//
// ServeHTTP is safe for concurrent use.
type Callback struct {
	Secret []byte
	// MaxAge bounds a signature's age (and clock skew); 0 means 5 minutes.
	MaxAge time.Duration
	provider.CallbackEndpoint
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
		c.Refuse(w, r, "no secret configured: status callbacks are refused")
		return
	}
	if err := Verify(c.Secret, r.Header.Get(SignatureHeader), body, c.Time(), maxAge); err != nil {
		c.Refuse(w, r, "invalid or stale signature: "+err.Error())
		return
	}
	var s statusBody
	outcome, ok := pb.Outcome(0), false
	if json.Unmarshal(body, &s) == nil {
		outcome, ok = provider.ParseOutcome(s.Outcome)
	}
	if !ok || s.CallID == "" || s.UserID == "" {
		c.Invalid(w, `want {"call_id", "user_id", "outcome"} with an outcome like "no_answer"`)
		return
	}
	st := provider.Status{CallID: s.CallID, UserID: s.UserID, Outcome: outcome, Final: provider.IsFinal(outcome),
		Detail: s.Detail, ProviderCallID: s.ProviderCallID, At: c.Time()}
	if s.Final != nil {
		st.Final = *s.Final
	}
	if outcome == pb.Outcome_OUTCOME_OPTED_OUT {
		st.Final = true // the recipient's answer ends what the call is for
	}
	c.Publish(w, r, st)
}
