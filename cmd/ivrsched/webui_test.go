package main

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds Debian's chromium (make test installs it). Under
// CI=true its absence fails the test; elsewhere it skips.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found (apt-get install chromium; make test installs it)")
	}
	t.Skip("chromium not found (apt-get install chromium)")
	return ""
}

// The web page in headless Chromium on `ivrsched run`: the page lists the
// upcoming call; looking the user up shows the follow-up with the phone
// masked; Run now with the admin token fires it, and the page shows the
// call; a campaign paused from the page is listed until it is resumed
// there. Screenshots go to the test's temp dir.
func TestWebPageInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	dir := t.TempDir()
	const token = "s3cret-admin-token"
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRun(t, "--admin-token-file", tokenFile)
	web, ctx := r.web, r.ctx
	r.cli("onboard", "--user", "web-user", "--phone", "+14155550142", "--task", "t1", "--campaign", "spring", "--delay", "10h")
	r.token = token
	// A wrong token changes nothing: without it the admin listener answers
	// 401; with it, a wrong token in the form is refused.
	for _, c := range []struct {
		auth bool
		want int
	}{{false, http.StatusUnauthorized}, {true, http.StatusForbidden}} {
		req, err := http.NewRequest(http.MethodPost, "http://"+web+"/ui/run-now", strings.NewReader(url.Values{"user": {"web-user"}, "task": {"t1"}, "token": {"guess"}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if c.auth {
			req.SetBasicAuth("admin", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Fatalf("run now with a wrong token (basic auth %v): %s, want %d", c.auth, resp.Status, c.want)
		}
	}
	// The browser sends the token as basic auth's password, given once in
	// the first address.
	base := "http://admin:" + token + "@" + web

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1200, 1000))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	bctx, tcancel := context.WithTimeout(bctx, 60*time.Second)
	defer tcancel()
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			png, err := chromedp.FullScreenshot(100)(ctx, tg) // quality 100: PNG
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, os.WriteFile(filepath.Join(dir, name), png, 0o644)
		}
	}
	text := func(sel string, into *string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			s, err := chromedp.Text(chromedp.CSS(sel))(ctx, tg)
			*into = s
			return chromedp.Void{}, err
		}
	}
	// The onboarding reaches the scheduler's index asynchronously: the
	// page is loaded until the upcoming call shows.
	var upcoming string
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(upcoming, "web-user"); {
		if err := chromedp.Do(bctx, chromedp.Navigate(base+"/ui/"), text("#upcoming", &upcoming)); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("upcoming calls on the page: %q", upcoming)
		}
	}
	var pending, page, calls string
	if err := chromedp.Do(bctx,
		shot("1-upcoming.png"),
		chromedp.SetValue(chromedp.CSS("#user"), "web-user"),
		chromedp.Click(chromedp.CSS("#lookup-button")),
		chromedp.WaitVisible(chromedp.CSS("#pending tr.task")),
		text("#pending", &pending),
		text("html", &page),
		shot("2-user.png"),
		chromedp.SetValue(chromedp.CSS("#pending input.token"), token),
		chromedp.Click(chromedp.CSS("#pending button.run-now")),
		// The page refreshes every second until the call shows.
		chromedp.WaitVisible(chromedp.CSS("#calls tr.call")),
		text("#calls", &calls),
		shot("3-called.png"),
	); err != nil {
		t.Fatalf("browser: %v (pending %q, calls %q)", err, pending, calls)
	}
	if !strings.Contains(pending, "t1") || !strings.Contains(pending, "spring") {
		t.Fatalf("the user's pending follow-ups: %q", pending)
	}
	if strings.Contains(page, "4155550142") || !strings.Contains(page, "42") {
		t.Fatalf("the phone number is not masked on the page")
	}
	if !strings.Contains(calls, "t1") {
		t.Fatalf("no call of t1 on the page: %q", calls)
	}

	// Pause a campaign from the page, see it listed, resume it.
	r.setPolicy("default:\n  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: \"00:00\", to: \"24:00\"}]\n")
	var message, paused, color string
	if err := chromedp.Do(bctx,
		chromedp.Navigate(base+"/ui/"),
		chromedp.SetValue(chromedp.CSS("#pause-campaign"), "spring"),
		chromedp.SetValue(chromedp.CSS("#pause-for"), "3h"),
		chromedp.SetValue(chromedp.CSS("#pause input.token"), token),
		chromedp.Click(chromedp.CSS("#pause-button")),
		chromedp.WaitVisible(chromedp.CSS("#message")),
		text("#message", &message),
		// The page's style element applies under its Content-Security-Policy.
		func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			s, err := chromedp.Evaluate[string](`getComputedStyle(document.getElementById("message")).color`)(ctx, tg)
			color = s
			return chromedp.Void{}, err
		},
	); err != nil {
		t.Fatalf("browser, pause: %v", err)
	}
	if !strings.Contains(message, "Campaign paused") || color != "rgb(0, 102, 0)" {
		t.Fatalf("after pause: %q in %s", message, color)
	}
	// The scheduler reads the policy topic asynchronously: reload until
	// the page lists spring as paused (or no longer).
	awaitPaused := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); strings.Contains(paused, "spring") != want; {
			if err := chromedp.Do(bctx, chromedp.Navigate(base+"/ui/"), text("#paused", &paused)); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("paused campaigns on the page: %q, want spring listed: %v", paused, want)
			}
		}
	}
	awaitPaused(true)
	if err := chromedp.Do(bctx,
		shot("4-paused.png"),
		chromedp.SetValue(chromedp.CSS("#paused tr.paused input.token"), token),
		chromedp.Click(chromedp.CSS("#paused button.resume")),
		chromedp.WaitVisible(chromedp.CSS("#message")),
		text("#message", &message),
	); err != nil {
		t.Fatalf("browser, resume: %v", err)
	}
	if !strings.Contains(message, "Campaign resumed") {
		t.Fatalf("after resume: %q", message)
	}
	awaitPaused(false)
	// Goka's monitor page runs its scripts, the vendored jQuery, lodash, d3
	// and Bootstrap, under its Content-Security-Policy: d3 fills the
	// partition table from the processor's statistics.
	var parts string
	if err := chromedp.Do(bctx,
		chromedp.Navigate(base+"/monitor/processor/0"),
		chromedp.WaitVisible(chromedp.CSS("#tableStatistics tr.partitionbox")),
		text("#tableStatistics", &parts),
		shot("5-monitor.png"),
	); err != nil {
		t.Fatalf("browser, Goka's monitor page: %v", err)
	}
	if parts == "" {
		t.Fatal("monitor: an empty partition table")
	}
	for _, f := range []string{"1-upcoming.png", "2-user.png", "3-called.png", "4-paused.png", "5-monitor.png"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() < 1000 {
			t.Fatalf("screenshot %s: %v", f, err)
		}
	}
	t.Logf("screenshots in %s", dir)
	r.stop()
}
