// Package webhook is the provider that places calls by POSTing them to an
// HTTP endpoint of the user's, and the status callback endpoint
// (/callbacks/webhook) through which that endpoint reports what became of
// them, both signed with a shared secret.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

// Headers of the requests the webhook provider sends.
const (
	SignatureHeader = "X-Ivrsched-Signature"
	// CallbackHeader carries the URL of the status callback endpoint, when
	// ivrsched has a public URL.
	CallbackHeader = "X-Ivrsched-Status-Callback"
)

// Webhook places calls by POSTing them, as protojson, to an HTTP endpoint.
//
// Each request carries the call id in the Idempotency-Key header; the
// endpoint must place a call id at most once (the dialer sends a call again
// after a 429, a 5xx, no answer, or a crash). With a Secret, each request is
// signed: X-Ivrsched-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
// "<t>.<body>">, so the endpoint can check origin and freshness. With a
// CallbackURL, X-Ivrsched-Status-Callback says where to report statuses
// (see Callback).
//
// A 2xx answer places the call; its body may be {"outcome": "ANSWERED",
// "detail": "...", "final": true, "provider_call_id": "..."} (an Outcome
// name, with or without the OUTCOME_ prefix). Without an outcome the call is
// placed, and final unless there is a CallbackURL (statuses will follow); an
// outcome other than placed is final unless the body says "final": false.
// 429 and 5xx answers, and requests that got no answer, are retryable; any
// other status fails the call.
//
// Place is safe for concurrent use.
type Webhook struct {
	URL         string
	Secret      []byte
	CallbackURL string
	// Scripts says whether an action's ivr_script may be TwiML or a URL
	// (an endpoint may pass it on to Twilio); by default it may be
	// neither: a name only.
	Scripts provider.Scripts
	Client  *http.Client
	// Now is the clock for signatures; nil means time.Now.
	Now func() time.Time
}

// ErrWebhook is wrapped by the errors of a failed webhook call.
var ErrWebhook = errors.New("webhook")

func (w *Webhook) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

// Place POSTs the call. A call whose script or number is refused
// (provider.ErrScript, provider.ErrDestination) fails without a request.
func (w *Webhook) Place(ctx context.Context, c *pb.IVRCall) (provider.Result, error) {
	if err := provider.CheckDestination(c.GetPhone()); err != nil {
		return provider.Result{}, fmt.Errorf("%w: %w", ErrWebhook, err)
	}
	if _, err := w.Scripts.Check(c.GetAction().GetIvrScript()); err != nil {
		return provider.Result{}, fmt.Errorf("%w: %w", ErrWebhook, err)
	}
	// protojson's spacing varies, which is valid JSON; the signature covers
	// the bytes sent.
	body, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(c)
	if err != nil {
		return provider.Result{}, fmt.Errorf("%w: %w", ErrWebhook, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return provider.Result{}, fmt.Errorf("%w: %w", ErrWebhook, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", c.GetCallId())
	if len(w.Secret) > 0 {
		req.Header.Set(SignatureHeader, Sign(w.Secret, w.now(), body))
	}
	if w.CallbackURL != "" {
		req.Header.Set(CallbackHeader, w.CallbackURL)
	}
	client := w.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		// The endpoint honours the idempotency key: sending again is safe.
		return provider.Result{}, fmt.Errorf("%w: %w", ErrWebhook, &provider.RetryableError{Err: err})
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return provider.Result{}, fmt.Errorf("%w: %w", ErrWebhook, provider.StatusError(resp, answer, w.now()))
	}
	res := provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED, Final: w.CallbackURL == ""}
	var a answerBody
	if len(bytes.TrimSpace(answer)) > 0 && json.Unmarshal(answer, &a) == nil {
		if o, ok := provider.ParseOutcome(a.Outcome); ok && o != pb.Outcome_OUTCOME_PLACED {
			res.Outcome, res.Final = o, true
		}
		if a.Final != nil {
			res.Final = *a.Final
		}
		res.Detail, res.ProviderCallID = provider.Text(a.Detail), a.ProviderCallID
	}
	return res, nil
}

// answerBody is the optional JSON of a 2xx answer.
type answerBody struct {
	Outcome        string `json:"outcome"`
	Detail         string `json:"detail"`
	Final          *bool  `json:"final"`
	ProviderCallID string `json:"provider_call_id"`
}

// Sign returns the X-Ivrsched-Signature value of body at time t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a signature header against body, accepting timestamps within
// maxAge of now. Endpoints written in Go can use it as is.
func Verify(secret []byte, header string, body []byte, now time.Time, maxAge time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return fmt.Errorf("%w: malformed signature header %q", ErrWebhook, header)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > maxAge || d < -maxAge {
		return fmt.Errorf("%w: signature time %s is %v away from now", ErrWebhook, ts, d)
	}
	want := Sign(secret, time.Unix(sec, 0), body)
	if !hmac.Equal([]byte(want), []byte("t="+ts+",v1="+sig)) {
		return fmt.Errorf("%w: signature mismatch", ErrWebhook)
	}
	return nil
}
