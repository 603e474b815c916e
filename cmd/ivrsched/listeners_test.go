package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/app"
)

// An instance with an admin token: no endpoint of its web servers answers
// a request without the token with a user's full phone number (the admin
// API and Goka's pages answer 401, pprof is not served even with the
// token); with the token,
// `show --show-phone` prints the number, and Goka's query page shows the
// user's value.
func TestNoFullPhoneWithoutTheToken(t *testing.T) {
	const token = "s3cret-admin-token-16+"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRun(t, "--admin-token-file", tokenFile)
	r.token = token
	const phone = "4155550142"
	r.cli("onboard", "--user", "phone-user", "--phone", "+1"+phone, "--task", "t1", "--delay", "10h")
	get := r.get
	r.awaitReady()
	table := "/query/ivr-scheduler-table/phone-user"
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) { // the table has no event to await
		if _, body := get(table, true); strings.Contains(body, phone) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the user's value does not show on Goka's query page with the token")
		}
	}
	for _, path := range []string{"/", "/admin/user/phone-user", "/admin/upcoming", table, "/query/", "/monitor/",
		"/ui/", "/ui/?user=phone-user", "/policy", "/metrics", "/healthz", "/readyz", "/debug/pprof/", "/debug/pprof/cmdline"} {
		code, body := get(path, false)
		if strings.Contains(body, phone) {
			t.Errorf("GET %s without the token: %d with the full phone number", path, code)
		}
		if (strings.HasPrefix(path, "/admin/") || strings.HasPrefix(path, "/query") || strings.HasPrefix(path, "/ui/")) && code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, code)
		}
		if strings.HasPrefix(path, "/debug/pprof/") {
			if code, _ := get(path, true); code != http.StatusNotFound {
				t.Errorf("GET %s with the token: %d, want 404 (pprof only with --pprof)", path, code)
			}
		}
	}
	if code, _ := get("/healthz", false); code != http.StatusOK {
		t.Errorf("/healthz without the token: %d", code)
	}
	if out := r.cli("show", "--user", "phone-user", "--admin-token-file", tokenFile); strings.Contains(out, phone) || !strings.Contains(out, "t1") {
		t.Errorf("show without --show-phone:\n%s", out)
	}
	if out := r.cli("show", "--user", "phone-user", "--show-phone", "--admin-token-file", tokenFile); !strings.Contains(out, "+1"+phone) {
		t.Errorf("show --show-phone with the token:\n%s", out)
	}
	if code, stderr := r.cliCode("show", "--user", "phone-user"); code == 0 || !strings.Contains(stderr, "401") || !strings.Contains(stderr, adminTokenEnv) {
		t.Errorf("show without the token: exit %d: %s", code, stderr)
	}
	r.stop()
}

// Without an admin token, the admin listener serves on loopback only, and
// shows every phone number masked: the admin API and Goka's query page
// (which still shows the user's value).
func TestWithoutATokenPhonesAreMasked(t *testing.T) {
	t.Setenv(adminTokenEnv, "")
	r := startRun(t)
	const phone = "4155550142"
	r.cli("onboard", "--user", "phone-user", "--phone", "+1"+phone, "--task", "t1", "--delay", "10h")
	get := func(path string) string {
		_, body := r.get(path, false)
		return body
	}
	r.awaitReady()
	for _, path := range []string{"/query/ivr-scheduler-table/phone-user", "/admin/user/phone-user"} {
		var body string
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(body, "t1"); time.Sleep(20 * time.Millisecond) { // the table has no event to await
			if body = get(path); time.Now().After(deadline) {
				t.Fatalf("GET %s: no value: %s", path, body)
			}
		}
		if strings.Contains(body, phone) || !strings.Contains(body, "42") {
			t.Errorf("GET %s without a token: the phone is not masked: %s", path, body)
		}
	}
	r.stop()
}

// Flag errors of the listeners: exit 2, one line naming the flag and what
// to set.
func TestListenerFlagErrors(t *testing.T) {
	t.Setenv(adminTokenEnv, "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"scheduler", "--http", "0.0.0.0:9095"}, "--admin-http: 0.0.0.0:9095 (--http's: the admin listener shares it unless --admin-http is given) is not a loopback address, and there is no admin token"},
		{[]string{"scheduler", "--http", "0.0.0.0:9095"}, "Set $" + adminTokenEnv},
		{[]string{"scheduler", "--http", "0.0.0.0:9095", "--admin-http", "10.0.0.7:9096"}, "--admin-http: 10.0.0.7:9096 is not a loopback address"},
		{[]string{"scheduler", "--admin-http", "127.0.0.1"}, `--admin-http: "127.0.0.1" is not host:port`},
		{[]string{"scheduler", "--pprof", "0.0.0.0:6060"}, "--pprof: 0.0.0.0:6060 is not a loopback address"},
		{[]string{"dialer", "--admin-http", "127.0.0.1:9096", "--callback-http", "127.0.0.1:9096"}, "--callback-http: 127.0.0.1:9096 is also the admin listener's"},
	} {
		var errb bytes.Buffer
		code := realMain(context.Background(), append(c.args, "--brokers", "127.0.0.1:1"), io.Discard, &errb)
		if msg := errb.String(); code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line containing %q", c.args, code, msg, c.want)
		}
	}
	// With a token, a public --http serves the admin listener too.
	t.Setenv(adminTokenEnv, "a-token-of-16-chars")
	cfg, err := roleConfig("scheduler", []string{"--http", "0.0.0.0:9095"}, app.Roles{Scheduler: true})
	if err != nil || cfg.AdminHTTP != "0.0.0.0:9095" || cfg.HTTP != "0.0.0.0:9095" {
		t.Errorf("--http 0.0.0.0:9095 with a token: %v, admin on %q", err, cfg.AdminHTTP)
	}
}

// The admin token has 16 characters or more, from the environment as from
// a file; a shorter one is a flag error that says so.
func TestAdminTokenLength(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("ten-chars!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  string
		args []string
		want string
	}{
		{"x", []string{"scheduler"}, "$" + adminTokenEnv + " holds 1 characters; want a token of 16 or more"},
		{"", []string{"scheduler", "--admin-token-file", file}, "--admin-token-file: " + file + " holds 10 characters; want a token of 16 or more"},
		{"fifteen-chars!!", []string{"show", "--user", "u"}, "$" + adminTokenEnv + " holds 15 characters"},
	} {
		t.Setenv(adminTokenEnv, c.env)
		var errb bytes.Buffer
		code := realMain(context.Background(), append(c.args, "--brokers", "127.0.0.1:1"), io.Discard, &errb)
		if msg := errb.String(); code != 2 || !strings.Contains(msg, c.want) {
			t.Errorf("%v with $%s=%q: exit %d, stderr %q; want exit 2 and %q", c.args, adminTokenEnv, c.env, code, msg, c.want)
		}
	}
	t.Setenv(adminTokenEnv, "sixteen-chars!!!")
	if cfg, err := roleConfig("scheduler", nil, app.Roles{Scheduler: true}); err != nil || cfg.AdminToken != "sixteen-chars!!!" {
		t.Errorf("a token of 16: %v", err)
	}
}

// Goka's pages load their scripts and styles from the binary, none from
// another site; /ui/ has a Content-Security-Policy that forbids framing,
// and shows only the messages it knows.
func TestPagesLoadNothingFromElsewhere(t *testing.T) {
	r := startRun(t)
	r.awaitReady()
	for _, path := range []string{"/", "/monitor/", "/monitor/processor/0", "/query/"} {
		code, body := r.get(path, false)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		for _, ref := range []string{`src="//`, `src="http`, `href="http`, `href='http`} {
			if strings.Contains(body, ref) {
				t.Errorf("GET %s loads from elsewhere (%s):\n%s", path, ref, body)
			}
		}
		for _, local := range []string{"/static/js/jquery-3.7.1.min.js", "/static/js/lodash-4.18.1.min.js", "/static/js/d3-4.13.0.min.js"} {
			if !strings.Contains(body, `src="`+local+`"`) {
				t.Errorf("GET %s does not load %s", path, local)
			}
		}
	}
	if code, body := r.get("/static/js/jquery-3.7.1.min.js", false); code != http.StatusOK || !strings.Contains(body, "jQuery v3.7.1") {
		t.Errorf("GET the vendored jQuery: %d", code)
	}
	resp, err := http.Get("http://" + r.web + "/ui/?msg=" + "Call+%2B19005550199+to+verify+your+account")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("/ui/ Content-Security-Policy %q", csp)
	}
	if strings.Contains(string(b), "verify your account") {
		t.Errorf("/ui/ shows a free-text message")
	}
	r.stop()
}
