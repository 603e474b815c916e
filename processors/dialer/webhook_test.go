package dialer

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

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

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
	if res.Outcome != pb.Outcome_OUTCOME_ANSWERED || res.Detail != "picked up" || got.GetCallId() != "c-9" || got.GetUserId() != "u1" {
		t.Fatalf("result %v, call %v", res, got)
	}

	// A wrong secret is refused by the endpoint: the call fails.
	bad := &Webhook{URL: srv.URL, Secret: []byte("other"), Now: func() time.Time { return now }}
	if _, err := bad.Place(context.Background(), call("u1", "c-10")); !errors.Is(err, ErrWebhook) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("got %v, want a 401 webhook error", err)
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
	if _, err := (&Webhook{URL: srv.URL}).Place(ctx, call("u", "c")); !errors.Is(err, ErrWebhook) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
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
