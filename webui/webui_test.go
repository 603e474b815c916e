package webui

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/ivrsched/ivrsched/admin"
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
		resp, err := http.Get(srv.URL + "/ui/?user=u1")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page := string(body)
		if strings.Contains(page, "4155550123") || !strings.Contains(page, "t1") || strings.Contains(page, "run-now") != c.button {
			t.Errorf("token %q: page shows the number, lacks the task, or the button is wrong (want %v):\n%s", c.token, c.button, page)
		}
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err = client.PostForm(srv.URL+"/ui/run-now", url.Values{"user": {"u1"}, "task": {"t1"}, "token": {c.sent}})
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
