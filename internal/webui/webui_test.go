package webui

import (
	"bytes"
	"context"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/admin"
)

// Without a token the page offers no action and the endpoint refuses it;
// with one, a wrong token is refused and the right one produces the
// command once.
func TestRunNowNeedsTheToken(t *testing.T) {
	var ran []string
	src := Source{
		User: func(ctx context.Context, id string) (admin.UserView, error) {
			return admin.UserView{UserID: id, Scheduler: []byte(`{"user_id":"u1","phone":"+14155550123","pending":[{"task_id":"t1"}]}`)}, nil
		},
		RunNow: func(ctx context.Context, user, task string) error { ran = append(ran, user+"/"+task); return nil },
	}
	for _, c := range []struct {
		token, sent string
		code        int
		button      bool
	}{{"", "", http.StatusForbidden, false}, {"right-token", "wrong", http.StatusForbidden, true}, {"right-token", "right-token", http.StatusSeeOther, true}} {
		src.Token = c.token
		srv := httptest.NewServer(Handler(src))
		page := pageOf(t, srv.URL+"/ui/?user=u1")
		if strings.Contains(page, "4155550123") || !strings.Contains(page, "t1") || strings.Contains(page, "run-now") != c.button {
			t.Errorf("token %q: page shows the number, lacks the task, or the button is wrong (want %v):\n%s", c.token, c.button, page)
		}
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.PostForm(srv.URL+"/ui/run-now", url.Values{"user": {"u1"}, "task": {"t1"}, "token": {c.sent}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("token %q, sent %q: %s, want %d", c.token, c.sent, resp.Status, c.code)
		}
		srv.Close()
	}
	if len(ran) != 1 || ran[0] != "u1/t1" {
		t.Fatalf("commands produced: %v", ran)
	}
}

// Pause and resume need the token like run now; a pause takes a duration
// within bounds, and the paused campaigns are listed with a resume button.
func TestPauseAndResume(t *testing.T) {
	type change struct {
		campaign string
		until    *time.Time
	}
	var changes []change
	paused := map[string]time.Time{}
	src := Source{
		Paused: func() map[string]time.Time { return paused },
		Pause: func(ctx context.Context, campaign string, until *time.Time) error {
			changes = append(changes, change{campaign, until})
			if until == nil {
				delete(paused, campaign)
			} else {
				paused[campaign] = *until
			}
			return nil
		},
		Token: "tok",
	}
	srv := httptest.NewServer(Handler(src))
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path string, v url.Values) int {
		t.Helper()
		resp, err := client.PostForm(srv.URL+path, v)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	get := func() string {
		t.Helper()
		resp, err := http.Get(srv.URL + "/ui/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, c := range []struct {
		v    url.Values
		code int
	}{
		{url.Values{"campaign": {"promo"}, "for": {"2h"}, "token": {"wrong"}}, http.StatusForbidden},
		{url.Values{"campaign": {"promo"}, "for": {"0s"}, "token": {"tok"}}, http.StatusBadRequest},
		{url.Values{"campaign": {"promo"}, "for": {"9000h"}, "token": {"tok"}}, http.StatusBadRequest},
		{url.Values{"campaign": {"promo"}, "for": {"soon"}, "token": {"tok"}}, http.StatusBadRequest},
		{url.Values{"campaign": {" "}, "for": {"2h"}, "token": {"tok"}}, http.StatusBadRequest},
	} {
		if code := post("/ui/pause", c.v); code != c.code {
			t.Errorf("pause %v: %d, want %d", c.v, code, c.code)
		}
	}
	if len(changes) != 0 {
		t.Fatalf("refused requests changed the policy: %v", changes)
	}
	before := time.Now()
	if code := post("/ui/pause", url.Values{"campaign": {"promo"}, "for": {"2h"}, "token": {"tok"}}); code != http.StatusSeeOther {
		t.Fatalf("pause: %d", code)
	}
	if len(changes) != 1 || changes[0].campaign != "promo" || changes[0].until == nil ||
		changes[0].until.Before(before.Add(2*time.Hour-time.Second)) || changes[0].until.After(time.Now().Add(2*time.Hour)) {
		t.Fatalf("pause made %v, want promo until about 2 h from now", changes)
	}
	if page := get(); !strings.Contains(page, `class="paused"><td>promo`) || !strings.Contains(page, `class="resume"`) {
		t.Fatalf("the page does not list promo as paused with a resume button:\n%s", page)
	}
	if code := post("/ui/resume", url.Values{"campaign": {"promo"}, "token": {"tok"}}); code != http.StatusSeeOther {
		t.Fatalf("resume: %d", code)
	}
	if len(changes) != 2 || changes[1].campaign != "promo" || changes[1].until != nil {
		t.Fatalf("resume made %v, want promo's pause ended", changes)
	}
	if page := get(); strings.Contains(page, `class="paused"`) {
		t.Fatalf("promo still listed after resume:\n%s", page)
	}
	src.Token = ""
	off := httptest.NewServer(Handler(src))
	defer off.Close()
	resp, err := client.PostForm(off.URL+"/ui/pause", url.Values{"campaign": {"promo"}, "for": {"2h"}, "token": {""}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || len(changes) != 2 {
		t.Fatalf("without a token: %s, %d changes", resp.Status, len(changes))
	}
}

// A user whose stored values do not decode is shown so, with why, not as
// a user without a value.
func TestUnreadableValuesAreShown(t *testing.T) {
	srv := httptest.NewServer(Handler(Source{User: func(ctx context.Context, id string) (admin.UserView, error) {
		return admin.UserView{UserID: id, SchedulerUnreadable: "stored value (2 bytes) does not decode: bad wire type",
			DialerUnreadable: "stored value (3 bytes) does not decode: bad tag"}, nil
	}}))
	defer srv.Close()
	page := pageOf(t, srv.URL+"/ui/?user=u1")
	for _, want := range []string{`id="scheduler-unreadable"`, "bad wire type", `id="dialer-unreadable"`, "bad tag", "until a Forget erases"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, `id="not-found"`) {
		t.Errorf("the user is shown as without a value:\n%s", page)
	}
}

// pageOf returns the body of the page at u.
func pageOf(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// An action's body is read up to 64 KiB, and only as an urlencoded form,
// before the token is checked: a multipart upload is refused unread (415)
// and a longer form is cut (413), and no command is produced.
func TestActionsReadAtMost64KiB(t *testing.T) {
	ran := 0
	h := Handler(Source{Token: "right-token", RunNow: func(context.Context, string, string) error { ran++; return nil }})
	var mp bytes.Buffer
	w := multipart.NewWriter(&mp)
	f, _ := w.CreateFormFile("f", "big.bin")
	f.Write(bytes.Repeat([]byte("a"), 8<<20))
	w.WriteField("token", "right-token")
	w.WriteField("user", "u1")
	w.WriteField("task", "t1")
	w.Close()
	long := "user=u1&task=t1&token=right-token&pad=" + strings.Repeat("a", 1<<20)
	for _, c := range []struct {
		name, ctype string
		body        []byte
		code        int
	}{
		{"multipart", w.FormDataContentType(), mp.Bytes(), http.StatusUnsupportedMediaType},
		{"a form of 1 MiB", "application/x-www-form-urlencoded", []byte(long), http.StatusRequestEntityTooLarge},
	} {
		body := &countingReader{r: bytes.NewReader(c.body)}
		req := httptest.NewRequest(http.MethodPost, "/ui/run-now", body)
		req.Header.Set("Content-Type", c.ctype)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.code || body.n > 64<<10+4096 {
			t.Errorf("%s: %d after reading %d bytes; want %d after 64 KiB at most", c.name, rec.Code, body.n, c.code)
		}
	}
	if ran != 0 {
		t.Fatalf("%d commands produced", ran)
	}
}

// Wrong tokens in the actions' forms count per host: after
// admin.AttemptsBurst of them the host gets 429.
func TestWrongFormTokensAreRateLimited(t *testing.T) {
	h := Handler(Source{Token: "right-token", Attempts: &admin.Attempts{}, RunNow: func(context.Context, string, string) error { return nil }})
	post := func() int {
		req := httptest.NewRequest(http.MethodPost, "/ui/run-now", strings.NewReader("user=u1&task=t1&token=guess"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for i := range admin.AttemptsBurst {
		if code := post(); code != http.StatusForbidden {
			t.Fatalf("wrong token %d: %d, want 403", i+1, code)
		}
	}
	if code := post(); code != http.StatusTooManyRequests {
		t.Fatalf("wrong token %d: %d, want 429", admin.AttemptsBurst+1, code)
	}
}
