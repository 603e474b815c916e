package admin

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/suppress"
)

// memStore is the list in memory.
type memStore struct {
	mu sync.Mutex
	m  map[string]*pb.Suppression
}

func (s *memStore) Write(_ context.Context, hash string, e *pb.Suppression) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e == nil {
		delete(s.m, hash)
	} else {
		s.m[hash] = e
	}
	return nil
}

func (s *memStore) Lookup(_ context.Context, hash string) (*suppress.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[hash]; ok {
		return &suppress.Entry{Hash: hash, Value: e}, nil
	}
	return nil, nil
}

func (s *memStore) ReadAll(context.Context) ([]suppress.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []suppress.Entry
	for h, e := range s.m {
		out = append(out, suppress.Entry{Hash: h, Value: e})
	}
	return out, nil
}

const (
	apiToken  = "admin-token-0123456789"
	listedNum = "+14155552671"
)

var apiKey = suppress.Key("0123456789abcdef0123456789abcdef")

func newAPI() (*Suppressions, *memStore, *clock.Fake) {
	st := &memStore{m: map[string]*pb.Suppression{}}
	clk := clock.NewFake(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	return &Suppressions{Store: st, Key: apiKey, Token: apiToken, Attempts: &Attempts{Clock: clk}, Clock: clk, Logger: slog.New(slog.DiscardHandler)}, st, clk
}

// do sends a request to h with token (none if empty) and returns the code
// and body.
func do(t *testing.T, h http.Handler, method, path, token, body string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

// noNumber fails if an answer holds the number's digits.
func noNumber(t *testing.T, what, body string) {
	t.Helper()
	if strings.Contains(body, "415555267") {
		t.Errorf("%s shows a number: %s", what, body)
	}
}

// Every request needs the admin token (a wrong one is counted, too many
// from a host get 429); an instance without a token has the API off.
func TestSuppressionAPIWantsTheToken(t *testing.T) {
	api, st, _ := newAPI()
	add := `{"number":"` + listedNum + `","reason":"asked"}`
	for _, c := range []struct{ method, path, body string }{
		{"GET", SuppressionsPath, ""},
		{"POST", SuppressionsPath, add},
		{"POST", SuppressionsPath + "/check", `{"number":"` + listedNum + `"}`},
		{"POST", SuppressionsPath + "/remove", `{"number":"` + listedNum + `"}`},
	} {
		if code, body := do(t, api, c.method, c.path, "", c.body); code != http.StatusUnauthorized {
			t.Errorf("%s %s without the token: %d %s", c.method, c.path, code, body)
		}
		if code, _ := do(t, api, c.method, c.path, "wrong-token-0123456789", c.body); code != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong token: %d", c.method, c.path, code)
		}
	}
	if len(st.m) != 0 {
		t.Fatalf("written without the token: %v", st.m)
	}
	for range AttemptsBurst {
		do(t, api, "GET", SuppressionsPath, "wrong-token-0123456789", "")
	}
	if code, _ := do(t, api, "GET", SuppressionsPath, apiToken, ""); code != http.StatusTooManyRequests {
		t.Errorf("after too many wrong tokens: %d, want 429", code)
	}
	off, _, _ := newAPI()
	off.Token = ""
	if code, _ := do(t, off, "GET", SuppressionsPath, apiToken, ""); code != http.StatusForbidden {
		t.Errorf("no admin token configured: %d, want 403", code)
	}
}

// Add, check, list and remove through the API: entries are shown by key,
// no answer holds the number (nor an error about one), check answers
// yes or no with the reason and until.
func TestSuppressionAPI(t *testing.T) {
	api, st, clk := newAPI()
	code, body := do(t, api, "POST", SuppressionsPath, apiToken, `{"number":"`+listedNum+`","reason":"asked by phone","until":"720h"}`)
	if code != http.StatusCreated {
		t.Fatalf("add: %d %s", code, body)
	}
	noNumber(t, "add", body)
	var added SuppressionEntry
	if err := json.Unmarshal([]byte(body), &added); err != nil || added.Key != apiKey.Hash(listedNum) || added.Reason != "asked by phone" ||
		added.Source != "admin" || !added.Active || added.Until == nil || !added.Until.Equal(clk.Now().Add(720*time.Hour)) {
		t.Fatalf("added %s (%v)", body, err)
	}
	if e := st.m[apiKey.Hash(listedNum)]; e.GetSource() != pb.Suppression_SOURCE_ADMIN || e.GetReason() != "asked by phone" {
		t.Fatalf("stored %v", e)
	}
	st.m[apiKey.Hash("+14155552672")] = &pb.Suppression{Reason: "opted out by keypress (call c1)", Source: pb.Suppression_SOURCE_OPT_OUT,
		AddedAt: timestamppb.New(clk.Now())}

	check := func(number string) SuppressionCheck {
		t.Helper()
		code, body := do(t, api, "POST", SuppressionsPath+"/check", apiToken, `{"number":"`+number+`"}`)
		if code != http.StatusOK {
			t.Fatalf("check: %d %s", code, body)
		}
		noNumber(t, "check", body)
		var c SuppressionCheck
		if err := json.Unmarshal([]byte(body), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := check(listedNum); !c.Suppressed || c.Entry.GetReason() != "asked by phone" || c.Entry.Until == nil {
		t.Fatalf("check of the listed number: %+v", c)
	}
	if c := check("+14155552673"); c.Suppressed || c.Entry != nil {
		t.Fatalf("check of an unlisted number: %+v", c)
	}

	code, body = do(t, api, "GET", SuppressionsPath, apiToken, "")
	noNumber(t, "list", body)
	var l SuppressionList
	if err := json.Unmarshal([]byte(body), &l); code != http.StatusOK || err != nil || l.Total != 2 || len(l.Entries) != 2 {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, body := do(t, api, "GET", SuppressionsPath+"?limit=1", apiToken, ""); code != http.StatusOK || strings.Count(body, `"key"`) != 1 || !strings.Contains(body, `"total":2`) {
		t.Fatalf("list with a limit: %d %s", code, body)
	}

	clk.Advance(721 * time.Hour)
	if c := check(listedNum); c.Suppressed || c.Entry == nil || c.Entry.Active {
		t.Fatalf("check after until: %+v", c)
	}
	code, body = do(t, api, "POST", SuppressionsPath+"/remove", apiToken, `{"number":"`+listedNum+`"}`)
	noNumber(t, "remove", body)
	if code != http.StatusOK || st.m[apiKey.Hash(listedNum)] != nil {
		t.Fatalf("remove: %d %s", code, body)
	}
	code, body = do(t, api, "POST", SuppressionsPath+"/remove", apiToken, `{"key":"`+apiKey.Hash("+14155552672")+`"}`)
	if code != http.StatusOK || len(st.m) != 0 {
		t.Fatalf("remove by key: %d %s", code, body)
	}

	// Refusals say what is accepted, without the number.
	for _, c := range []struct{ path, body, want string }{
		{SuppressionsPath, `{"number":"+1415555267"}`, "number: too short"},
		{SuppressionsPath, `{"number":"4155552671"}`, "E.164"},
		{SuppressionsPath, `{"number":"` + listedNum + `","until":"-1h"}`, "until:"},
		{SuppressionsPath, `{"number":"` + listedNum + `","reason":"` + strings.Repeat("x", 300) + `"}`, "reason: 300 bytes"},
		{SuppressionsPath, `{"number":"` + listedNum + `","phone":"x"}`, "want a JSON object"},
		{SuppressionsPath + "/remove", `{"key":"abc"}`, "key:"},
		{SuppressionsPath + "/check", `{}`, "number: required"},
	} {
		code, body := do(t, api, "POST", c.path, apiToken, c.body)
		if code != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("%s %s: %d %s, want 400 with %q", c.path, c.body, code, body, c.want)
		}
		noNumber(t, "refusal", body)
	}
	if len(st.m) != 0 {
		t.Fatalf("refused requests wrote %v", st.m)
	}
}

// GetReason reads a shown entry's reason (nil: none).
func (e *SuppressionEntry) GetReason() string {
	if e == nil {
		return ""
	}
	return e.Reason
}
