package webui

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/suppress"
)

type memList struct {
	mu sync.Mutex
	m  map[string]*pb.Suppression
}

func (l *memList) Write(_ context.Context, h string, e *pb.Suppression) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e == nil {
		delete(l.m, h)
	} else {
		l.m[h] = e
	}
	return nil
}

func (l *memList) Lookup(_ context.Context, h string) (*suppress.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.m[h]; e != nil {
		return &suppress.Entry{Hash: h, Value: e}, nil
	}
	return nil, nil
}

func (l *memList) ReadAll(context.Context) ([]suppress.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []suppress.Entry
	for h, e := range l.m {
		out = append(out, suppress.Entry{Hash: h, Value: e})
	}
	return out, nil
}

// The do-not-call page lists entries by key, never a number; its check,
// add and remove forms need the admin token; a check answers with the
// number masked; without a token the section is off.
func TestSuppressionsPage(t *testing.T) {
	key := suppress.Key("0123456789abcdef0123456789abcdef")
	list := &memList{m: map[string]*pb.Suppression{}}
	src := Source{Token: "tok", Suppressions: &admin.Suppressions{Store: list, Key: key, Token: "tok"}}
	srv := httptest.NewServer(Handler(src))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(action string, f url.Values) (int, string) {
		t.Helper()
		resp, err := client.PostForm(srv.URL+"/ui/suppressions/"+action, f)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const number = "+14155550123"
	if code, _ := post("add", url.Values{"number": {number}, "reason": {"asked"}, "token": {"wrong"}}); code != http.StatusForbidden || len(list.m) != 0 {
		t.Fatalf("add with a wrong token: %d, list %v", code, list.m)
	}
	if code, _ := post("add", url.Values{"number": {number}, "reason": {"asked"}, "token": {"tok"}}); code != http.StatusSeeOther || list.m[key.Hash(number)] == nil {
		t.Fatalf("add: %d, list %v", code, list.m)
	}
	page := pageOf(t, srv.URL+"/ui/suppressions?msg=added")
	if strings.Contains(page, "5550123") || !strings.Contains(page, key.Hash(number)[:16]) || !strings.Contains(page, "asked") || !strings.Contains(page, "Number added") {
		t.Fatalf("page:\n%s", page)
	}
	code, body := post("check", url.Values{"number": {number}, "token": {"tok"}})
	if code != http.StatusOK || strings.Contains(body, "5550123") || !strings.Contains(body, "<b>suppressed</b>") || !strings.Contains(body, "••23") {
		t.Fatalf("check: %d\n%s", code, body)
	}
	if code, body := post("check", url.Values{"number": {"+14155550124"}, "token": {"tok"}}); code != http.StatusOK || !strings.Contains(body, "not suppressed") {
		t.Fatalf("check of an unlisted number: %d\n%s", code, body)
	}
	if code, body := post("check", url.Values{"number": {"4155550124"}, "token": {"tok"}}); code != http.StatusBadRequest || strings.Contains(body, "5550124") {
		t.Fatalf("check of a malformed number: %d %s", code, body)
	}
	if code, _ := post("remove", url.Values{"key": {key.Hash(number)}, "token": {"tok"}}); code != http.StatusSeeOther || len(list.m) != 0 {
		t.Fatalf("remove: %d, list %v", code, list.m)
	}

	src.Token = ""
	off := httptest.NewServer(Handler(src))
	defer off.Close()
	if page := pageOf(t, off.URL+"/ui/suppressions"); !strings.Contains(page, `id="off"`) || strings.Contains(page, `id="add"`) {
		t.Fatalf("page without a token:\n%s", page)
	}
	resp, err := http.PostForm(off.URL+"/ui/suppressions/add", url.Values{"number": {number}, "token": {""}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || len(list.m) != 0 {
		t.Fatalf("add without a token: %s, list %v", resp.Status, list.m)
	}
}
