package webhook

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

type sink struct {
	mu   sync.Mutex
	got  []provider.Status
	fail error
}

func (s *sink) Publish(_ context.Context, st provider.Status) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.got = append(s.got, st)
	return nil
}

func post(t *testing.T, h http.Handler, body, sig string) int {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, CallbackPath, strings.NewReader(body))
	if sig != "" {
		r.Header.Set(SignatureHeader, sig)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func TestCallbackVerifiesAndPublishes(t *testing.T) {
	secret, now := []byte("s3cret"), time.Unix(1_800_000_000, 0)
	s := &sink{}
	cb := &Callback{Secret: secret, CallbackEndpoint: provider.CallbackEndpoint{Sink: s, Now: func() time.Time { return now }}}
	body := `{"call_id":"c-1","user_id":"u-1","outcome":"no-answer","detail":"rang 30s"}`
	if code := post(t, cb, body, Sign(secret, now.Add(-time.Minute), []byte(body))); code != http.StatusNoContent {
		t.Fatalf("valid: %d", code)
	}
	answered := `{"call_id":"c-2","user_id":"u-1","outcome":"answered"}`
	if code := post(t, cb, answered, Sign(secret, now, []byte(answered))); code != http.StatusNoContent {
		t.Fatalf("valid: %d", code)
	}
	if len(s.got) != 2 || s.got[0].Outcome != pb.Outcome_OUTCOME_NO_ANSWER || !s.got[0].Final || s.got[0].UserID != "u-1" ||
		s.got[0].Detail != "rang 30s" || s.got[1].Final {
		t.Fatalf("published %+v", s.got)
	}

	for name, sig := range map[string]string{
		"unsigned":    "",
		"wrong key":   Sign([]byte("other"), now, []byte(body)),
		"stale":       Sign(secret, now.Add(-10*time.Minute), []byte(body)),
		"other body":  Sign(secret, now, []byte(answered)),
		"garbage sig": "t=x,v1=y",
	} {
		if code := post(t, cb, body, sig); code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", name, code)
		}
	}
	if cb.Stats.Rejected.Load() != 5 || cb.Stats.Accepted.Load() != 2 || len(s.got) != 2 {
		t.Fatalf("rejected %d accepted %d published %d", cb.Stats.Rejected.Load(), cb.Stats.Accepted.Load(), len(s.got))
	}

	bad := `{"call_id":"c-3","user_id":"u-1","outcome":"sideways"}`
	if code := post(t, cb, bad, Sign(secret, now, []byte(bad))); code != http.StatusBadRequest || cb.Stats.Invalid.Load() != 1 {
		t.Fatalf("unknown outcome: %d", code)
	}
	// The same status again (a replay within the signature's age) is
	// answered, not published again.
	if code := post(t, cb, body, Sign(secret, now, []byte(body))); code != http.StatusNoContent || len(s.got) != 2 || cb.Stats.Repeated.Load() != 1 {
		t.Fatalf("repeat: %d, published %d", code, len(s.got))
	}
	s.fail = errors.New("kafka down")
	busy := `{"call_id":"c-4","user_id":"u-1","outcome":"busy"}`
	if code := post(t, cb, busy, Sign(secret, now, []byte(busy))); code != http.StatusServiceUnavailable || cb.Stats.Failed.Load() != 1 {
		t.Fatalf("unpublished: %d", code)
	}
	if code := post(t, &Callback{CallbackEndpoint: provider.CallbackEndpoint{Sink: s}}, body, Sign(secret, now, []byte(body))); code != http.StatusForbidden {
		t.Fatalf("no secret configured: %d", code)
	}
}
