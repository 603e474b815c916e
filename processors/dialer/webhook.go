package dialer

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

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// Webhook places calls by POSTing them, as protojson, to an HTTP endpoint.
//
// Each request carries the call id in the Idempotency-Key header; the
// endpoint must place a call id at most once. With a Secret, each request is
// signed: X-Ivrsched-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
// "<t>.<body>">, so the endpoint can check origin and freshness.
//
// A 2xx answer places the call; its body may be {"outcome": "ANSWERED",
// "detail": "..."} (an Outcome name, with or without the OUTCOME_ prefix),
// else the outcome is PLACED. Any other status, or no answer, is an error:
// the call is recorded as failed.
type Webhook struct {
	URL    string
	Secret []byte
	Client *http.Client
	// Now is the clock for signatures; nil means time.Now.
	Now func() time.Time
}

// ErrWebhook is wrapped by the errors of a failed webhook call.
var ErrWebhook = errors.New("webhook")

// Place POSTs the call.
func (w *Webhook) Place(ctx context.Context, c *pb.IVRCall) (Result, error) {
	body := []byte(codec.JSON(c))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrWebhook, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", c.GetCallId())
	if len(w.Secret) > 0 {
		now := time.Now
		if w.Now != nil {
			now = w.Now
		}
		req.Header.Set("X-Ivrsched-Signature", Sign(w.Secret, now(), body))
	}
	client := w.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrWebhook, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return Result{}, fmt.Errorf("%w: status %d: %s", ErrWebhook, resp.StatusCode, strings.TrimSpace(string(answer[:min(len(answer), 200)])))
	}
	res := Result{Outcome: pb.Outcome_OUTCOME_PLACED}
	var a struct{ Outcome, Detail string }
	if len(bytes.TrimSpace(answer)) > 0 && json.Unmarshal(answer, &a) == nil {
		if o, ok := parseOutcome(a.Outcome); ok {
			res.Outcome = o
		}
		res.Detail = a.Detail
	}
	return res, nil
}

func parseOutcome(s string) (pb.Outcome, bool) {
	s = strings.ToUpper(strings.TrimSpace(s))
	if s == "" {
		return 0, false
	}
	if !strings.HasPrefix(s, "OUTCOME_") {
		s = "OUTCOME_" + s
	}
	v, ok := pb.Outcome_value[s]
	return pb.Outcome(v), ok && v != 0
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
