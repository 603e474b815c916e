package main

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pause and resume on `ivrsched run`: a paused campaign's follow-up is held
// (deferred to the pause's end, reason paused) while another campaign's
// fires; resume makes it fire at once.
func TestPauseHoldsAndResumeFires(t *testing.T) {
	broker, web := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- realMain(ctx, []string{"run", "--embedded-addr", broker, "--http", web, "--data-dir", t.TempDir(), "--log-level", "warn", "--default-policy", "none"}, &runOut, io.Discard)
	}()
	for !strings.Contains(runOut.String(), "web UI on") {
		select {
		case code := <-done:
			t.Fatalf("run exited %d: %s", code, runOut.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cli := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := realMain(ctx, append(args, "--brokers", broker), &out, &errb); code != 0 {
			t.Fatalf("%v exited %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	inForce := func(out string) {
		t.Helper()
		first, _, _ := strings.Cut(out, "\n")
		version := strings.TrimPrefix(first, "# policy set, version ")
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) { // the page has no event to await
			resp, err := http.Get("http://" + web + "/policy")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(html.UnescapeString(string(b)), version) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("version %s not in force", version)
			}
		}
	}
	var errb bytes.Buffer
	if code := realMain(ctx, []string{"pause", "--campaign", "promo", "--brokers", broker}, io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), "no calling policy is set") {
		t.Fatalf("pause without a policy: exit %d, %s", code, errb.String())
	}
	file := filepath.Join(t.TempDir(), "open.yaml")
	if err := os.WriteFile(file, []byte("default:\n  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: \"00:00\", to: \"24:00\"}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inForce(cli("policy", "set", "-f", file))
	inForce(cli("pause", "--campaign", "promo", "--for", "1h"))

	cli("onboard", "--user", "p", "--phone", "+14155550100", "--task", "t", "--campaign", "promo", "--delay", "1s")
	cli("onboard", "--user", "o", "--phone", "+14155550101", "--task", "t", "--campaign", "other", "--delay", "1s")
	if calls := cli("calls", "--limit", "1"); !strings.Contains(calls, `"user_id":"o"`) {
		t.Fatalf("calls: %s", calls)
	}
	var st struct {
		Scheduler struct {
			Pending []struct {
				Deferred string    `json:"deferred"`
				DueAt    time.Time `json:"due_at"`
			} `json:"pending"`
		} `json:"scheduler"`
	}
	if err := json.Unmarshal([]byte(cli("show", "--user", "p")), &st); err != nil {
		t.Fatal(err)
	}
	if p := st.Scheduler.Pending; len(p) != 1 || p[0].Deferred != "paused" || p[0].DueAt.Before(time.Now().Add(59*time.Minute)) {
		t.Fatalf("the paused campaign's follow-up: %+v", p)
	}

	inForce(cli("resume", "--campaign", "promo"))
	if calls := cli("calls", "--limit", "2", "--since", "1m"); !strings.Contains(calls, `"user_id":"p"`) {
		t.Fatalf("resume: no call for the held follow-up: %s", calls)
	}
	if code := realMain(ctx, []string{"resume", "--campaign", "promo", "--brokers", broker}, io.Discard, &errb); code != 2 {
		t.Fatalf("resume of a campaign not paused: exit %d", code)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exited %d", code)
	}
}
