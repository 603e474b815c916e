package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// explain's start: a duration back (days too) or an RFC 3339 time, 7 days
// by default, at most 30 days back; anything else says what it accepts.
func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     now.Add(-7 * 24 * time.Hour),
		"2d":                   now.Add(-48 * time.Hour),
		"90m":                  now.Add(-90 * time.Minute),
		"2026-12-01T00:00:00Z": time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC),
	} {
		if got, err := ParseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"31d", "-1h", "0s", "1.5d", "yesterday", "2026-10-01T00:00:00Z"} {
		if _, err := ParseSince(in, now); err == nil || !strings.Contains(err.Error(), "want") && !strings.Contains(err.Error(), "at most") {
			t.Errorf("ParseSince(%q): %v, want an error saying what is accepted", in, err)
		}
	}
}

// /api/explain refuses a request without a user, with a bad since, or not
// a GET, before it reads anything.
func TestExplainHandlerRefusesBadRequests(t *testing.T) {
	h := ExplainHandler(&Client{}, func() time.Time { return time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC) })
	for _, c := range []struct {
		method, url string
		code        int
	}{
		{http.MethodGet, "/api/explain", http.StatusBadRequest},
		{http.MethodGet, "/api/explain?user=u1&since=forever", http.StatusBadRequest},
		{http.MethodPost, "/api/explain?user=u1", http.StatusMethodNotAllowed},
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(c.method, c.url, nil))
		if w.Code != c.code {
			t.Errorf("%s %s: %d %s, want %d", c.method, c.url, w.Code, w.Body.String(), c.code)
		}
	}
}
