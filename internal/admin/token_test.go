package admin

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/clock"
)

// A host that sent wrong tokens AttemptsBurst times gets 429, its next
// tokens unread, even the right one, until a failure leaks away; another
// host, and a request without a token, are not limited.
func TestFailedTokensAreRateLimited(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	h := RequireToken("the-right-token-16", &Attempts{Clock: clk}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	ask := func(host, token string) int {
		req := httptest.NewRequest(http.MethodGet, "/admin/upcoming", nil)
		req.RemoteAddr = host + ":40000"
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for i := range AttemptsBurst {
		if code := ask("10.0.0.9", "guess"); code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, code)
		}
	}
	if code := ask("10.0.0.9", "guess"); code != http.StatusTooManyRequests {
		t.Fatalf("wrong token %d: %d, want 429", AttemptsBurst+1, code)
	}
	if code := ask("10.0.0.9", "the-right-token-16"); code != http.StatusTooManyRequests {
		t.Fatalf("the right token from a blocked host: %d, want 429", code)
	}
	if code := ask("10.0.0.8", "the-right-token-16"); code != http.StatusOK {
		t.Fatalf("the right token from another host: %d", code)
	}
	for range 2 * AttemptsBurst {
		if code := ask("10.0.0.8", ""); code != http.StatusUnauthorized {
			t.Fatalf("no token: %d, want 401 (not counted)", code)
		}
	}
	clk.Advance(AttemptsEvery)
	if code := ask("10.0.0.9", "the-right-token-16"); code != http.StatusOK {
		t.Fatalf("the right token after %v: %d", AttemptsEvery, code)
	}
}
