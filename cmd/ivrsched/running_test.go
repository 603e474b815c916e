package main

import (
	"bytes"
	"context"
	"html"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// running is `ivrsched run` on an embedded broker for a test, with its web
// server, and the CLI pointed at it.
type running struct {
	t           *testing.T
	ctx         context.Context
	cancel      context.CancelFunc
	broker, web string
	// token is the admin token the run was given, sent with the test's
	// own requests to the admin listener; empty: none.
	token string
	done  chan int
}

// startRun starts `ivrsched run` (no calling policy, warnings only, extra
// flags added) and waits until its web server is up. It stops when the
// test ends; stop checks that it exits cleanly.
func startRun(t *testing.T, extra ...string) *running {
	t.Helper()
	r := &running{t: t, broker: freeAddr(t), web: freeAddr(t), done: make(chan int, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.ctx, r.cancel = ctx, cancel
	var out syncBuffer
	args := append([]string{"run", "--embedded-addr", r.broker, "--http", r.web, "--data-dir", t.TempDir(), "--log-level", "warn", "--default-policy", "none"}, extra...)
	go func() { r.done <- realMain(ctx, args, &out, io.Discard) }()
	for !strings.Contains(out.String(), "web UI on") {
		select {
		case code := <-r.done:
			t.Fatalf("run exited %d: %s", code, out.String())
		case <-time.After(10 * time.Millisecond): // the output has no event to await
		}
	}
	return r
}

// cli runs a command against the broker and returns its output; it fails
// the test unless the command exits 0.
func (r *running) cli(args ...string) string {
	r.t.Helper()
	var out, errb bytes.Buffer
	if code := realMain(r.ctx, append(args, "--brokers", r.broker), &out, &errb); code != 0 {
		r.t.Fatalf("%v exited %d: %s", args, code, errb.String())
	}
	return out.String()
}

// cliCode runs a command and returns its exit code and standard error.
func (r *running) cliCode(args ...string) (int, string) {
	var errb bytes.Buffer
	code := realMain(r.ctx, append(args, "--brokers", r.broker), io.Discard, &errb)
	return code, errb.String()
}

// setPolicy sets the policy doc and waits until the scheduler applies it.
func (r *running) setPolicy(doc string) {
	r.t.Helper()
	file := filepath.Join(r.t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.awaitPolicy(r.cli("policy", "set", "-f", file))
}

// awaitPolicy waits until the scheduler applies the policy that a policy
// set, pause or resume printed.
func (r *running) awaitPolicy(printed string) {
	r.t.Helper()
	first, _, _ := strings.Cut(printed, "\n")
	version := strings.TrimPrefix(first, "# policy set, version ")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) { // the page has no event to await
		if _, b := r.get("/policy", r.token != ""); strings.Contains(html.UnescapeString(b), version) {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the scheduler does not apply version %s", version)
		}
	}
}

// get asks the web server for path, with r.token as a browser sends it
// (basic auth's password) if withToken, and returns the status and body.
func (r *running) get(path string, withToken bool) (int, string) {
	r.t.Helper()
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, "http://"+r.web+path, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	if withToken {
		req.SetBasicAuth("admin", r.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// awaitReady waits until /readyz answers 200.
func (r *running) awaitReady() {
	r.t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) { // readiness has no event to await
		code, body := r.get("/readyz", false)
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("/readyz: %d %s", code, body)
		}
	}
}

// stop ends the run and checks that it exited 0.
func (r *running) stop() {
	r.t.Helper()
	r.cancel()
	if code := <-r.done; code != 0 {
		r.t.Fatalf("run exited %d", code)
	}
}
