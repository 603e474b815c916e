package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

func call(user, id string) *pb.IVRCall {
	return &pb.IVRCall{CallId: id, UserId: user, TaskId: "t-" + id, Phone: "+14155550123", Attempt: 1, DueAt: timestamppb.Now(), FiredAt: timestamppb.Now()}
}

func TestWebhookSendsSignedCallWithIdempotencyKey(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Unix(1_800_000_000, 0)
	var got *pb.IVRCall
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := Verify(secret, r.Header.Get("X-Ivrsched-Signature"), body, now, time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		got = &pb.IVRCall{}
		if err := protojson.Unmarshal(body, got); err != nil || r.Header.Get("Idempotency-Key") != got.GetCallId() {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Write([]byte(`{"outcome":"answered","detail":"picked up"}`))
	}))
	defer srv.Close()
	wh := &Webhook{URL: srv.URL, Secret: secret, Now: func() time.Time { return now }}
	res, err := wh.Place(context.Background(), call("u1", "c-9"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != pb.Outcome_OUTCOME_ANSWERED || !res.Final || res.Detail != "picked up" || got.GetCallId() != "c-9" || got.GetUserId() != "u1" {
		t.Fatalf("result %v, call %v", res, got)
	}

	// A wrong secret is refused by the endpoint: the call fails.
	bad := &Webhook{URL: srv.URL, Secret: []byte("other"), Now: func() time.Time { return now }}
	_, err = bad.Place(context.Background(), call("u1", "c-10"))
	if _, retry := provider.AsRetryable(err); !errors.Is(err, ErrWebhook) || !strings.Contains(err.Error(), "401") || retry {
		t.Fatalf("got %v, want a 401 webhook error that is not retried", err)
	}
}

func TestWebhookTimeoutIsAnError(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := (&Webhook{URL: srv.URL}).Place(ctx, call("u", "c"))
	if _, retry := provider.AsRetryable(err); !errors.Is(err, ErrWebhook) || !errors.Is(err, context.DeadlineExceeded) || !retry {
		t.Fatalf("got %v, want a retryable deadline error (the endpoint honours the idempotency key)", err)
	}
}

func TestVerifyRejectsStaleAndTampered(t *testing.T) {
	secret, body, t0 := []byte("k"), []byte(`{"a":1}`), time.Unix(1_800_000_000, 0)
	h := Sign(secret, t0, body)
	if err := Verify(secret, h, body, t0.Add(30*time.Second), time.Minute); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	if err := Verify(secret, h, body, t0.Add(2*time.Minute), time.Minute); err == nil {
		t.Fatal("stale signature accepted")
	}
	if err := Verify(secret, h, []byte(`{"a":2}`), t0, time.Minute); err == nil {
		t.Fatal("tampered body accepted")
	}
	if err := Verify(secret, "garbage", body, t0, time.Minute); err == nil {
		t.Fatal("malformed header accepted")
	}
}

// 429 and 5xx are retryable, with the answer's Retry-After; 4xx are not.
func TestWebhookClassifiesAnswers(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	cases := []struct {
		status     int
		retryAfter string
		retry      bool
		after      time.Duration
	}{
		{429, "3", true, 3 * time.Second},
		{503, now.Add(7 * time.Second).UTC().Format(http.TimeFormat), true, 7 * time.Second},
		{500, "", true, 0},
		{400, "", false, 0},
		{404, "5", false, 0},
	}
	for _, c := range cases {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c.retryAfter != "" {
				w.Header().Set("Retry-After", c.retryAfter)
			}
			http.Error(w, "no", c.status)
		}))
		_, err := (&Webhook{URL: srv.URL, Now: func() time.Time { return now }}).Place(context.Background(), call("u", "c"))
		srv.Close()
		re, retry := provider.AsRetryable(err)
		if err == nil || retry != c.retry || (retry && (re.Status != c.status || re.RetryAfter != c.after)) {
			t.Errorf("status %d: err %v, retryable %v %+v", c.status, err, retry, re)
		}
	}
}

// Without an outcome in the answer, the call is placed: final when no
// status callbacks will follow.
func TestWebhookPlacedAwaitsCallbacks(t *testing.T) {
	var hdr string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr = r.Header.Get(CallbackHeader)
		w.Write([]byte(`{"provider_call_id":"p-1"}`))
	}))
	defer srv.Close()
	res, err := (&Webhook{URL: srv.URL}).Place(context.Background(), call("u", "c"))
	if err != nil || res.Outcome != pb.Outcome_OUTCOME_PLACED || !res.Final || hdr != "" {
		t.Fatalf("no callbacks: %+v %v, header %q", res, err, hdr)
	}
	res, err = (&Webhook{URL: srv.URL, CallbackURL: "https://ivr.example/callbacks/webhook"}).Place(context.Background(), call("u", "c"))
	if err != nil || res.Outcome != pb.Outcome_OUTCOME_PLACED || res.Final || res.ProviderCallID != "p-1" || hdr != "https://ivr.example/callbacks/webhook" {
		t.Fatalf("with callbacks: %+v %v, header %q", res, err, hdr)
	}
}

// The webhook passes a script name on; TwiML or a URL in its place is
// refused as Twilio's provider refuses it, before any request.
func TestWebhookRefusesScriptsThatAreNotNames(t *testing.T) {
	var requests int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests++ }))
	defer srv.Close()
	wh := &Webhook{URL: srv.URL}
	for _, script := range []string{"<Response><Dial>+19005550199</Dial></Response>", "https://evil.example/x"} {
		c := call("u1", "c-1")
		c.Action = &pb.Action{IvrScript: script}
		if _, err := wh.Place(context.Background(), c); err == nil {
			t.Errorf("script %q placed", script)
		}
	}
	c := call("u1", "c-2")
	c.Phone = "+19005550199"
	if _, err := wh.Place(context.Background(), c); err == nil {
		t.Errorf("premium-rate number placed")
	}
	if requests != 0 {
		t.Fatalf("%d requests reached the endpoint", requests)
	}
}
