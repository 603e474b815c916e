package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFlagErrorsAreOneLineNamingTheFlag(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"onboard", "--phone", "+14155550123"}, "--user: required"},
		{[]string{"onboard", "--user", "u"}, "--phone: required"},
		{[]string{"onboard", "--user", "u", "--phone", "12345"}, "invalid_phone"},
		{[]string{"onboard", "--user", "u", "--phone", "+14155550123", "--delay", "-1s"}, "--delay: -1s"},
		{[]string{"onboard", "--user", "u", "--phone", "+14155550123", "--delay", "soon"}, "-delay"},
		{[]string{"onboard", "--user", "u", "--phone", "+14155550123", "--at", "tomorrow"}, "--at: \"tomorrow\" is not an RFC 3339 time"},
		{[]string{"onboard", "--user", "u", "--phone", "+14155550123", "--delay", "1s", "--at", "2026-01-01T00:00:00Z"}, "--at: give --delay or --at"},
		{[]string{"onboard", "--user", "u", "--phone", "+14155550123", "--tz", "Moon/Base"}, "unknown_time_zone"},
		{[]string{"onboard", "--user", "u", "--phone", "+14155550123", "--brokers", "nohost"}, "--brokers: \"nohost\" is not host:port"},
		{[]string{"onboard", "--user", "u", "--phone", "+14155550123", "--delay", "10000h"}, "delay_too_long"},
		{[]string{"onboard", "--user", "u", "--phone", "+14155550123", "--delay", "100h", "--max-delay", "99h"}, "delay_too_long"},
		{[]string{"onboard", "--user", "u", "--phone", "+14155550123", "--at", "2020-01-01T00:00:00Z"}, "due_too_far_past"},
		{[]string{"onboard", "--user", "u", "--phone", "+14155550123", "--at", "2300-01-01T00:00:00Z"}, "time_out_of_range"},
		{[]string{"onboard", "--user", "u", "--phone", "+14155550123", "--max-skew", "0s"}, "--max-skew: 0s"},
		{[]string{"run", "--max-follow-ups", "0", "--brokers", "127.0.0.1:1"}, "--max-follow-ups: 0; want a count >= 1"},
		{[]string{"run", "--max-follow-ups", "10", "--max-pending", "5", "--brokers", "127.0.0.1:1"}, "--max-pending: 5; want a count >= --max-follow-ups (10)"},
		{[]string{"onboard", "--user", strings.Repeat("u", 257), "--phone", "+14155550123"}, "too_long"},
		{[]string{"reschedule", "--user", "u", "--task", "t", "--delay", "10000h"}, "delay_too_long"},
		{[]string{"cancel"}, "--user: required"},
		{[]string{"forget"}, "--user: required"},
		{[]string{"forget", "--user", "__ivrsched-tick-0"}, "reserved_user_id"},
		{[]string{"reschedule", "--user", "u"}, "--task: required"},
		{[]string{"reschedule", "--user", "u", "--task", "t"}, "--delay: required"},
		{[]string{"calls", "--limit", "-2"}, "--limit: -2"},
		{[]string{"run", "--partitions", "0", "--brokers", "127.0.0.1:1"}, "--partitions: 0"},
		{[]string{"run", "--fetch-wait", "10us", "--brokers", "127.0.0.1:1"}, "--fetch-wait: 10µs"},
		{[]string{"run", "--background-fetch-wait", "2s", "--brokers", "127.0.0.1:1"}, "--background-fetch-wait: 2s"},
		{[]string{"run", "--log-level", "loud", "--brokers", "127.0.0.1:1"}, "--log-level: \"loud\""},
		{[]string{"run", "--demo", "--demo-file", "missing.jsonl"}, "--demo-file: missing.jsonl not found"},
		{[]string{"scheduler", "extra"}, `unexpected argument "extra"`},
		{[]string{"dialer", "--tick-gap", "0s"}, "--tick-gap: 0s"},
		{[]string{"scheduler", "--retain", "10s"}, "--retain: 10s"},
		{[]string{"run", "--past-due", "later", "--brokers", "127.0.0.1:1"}, "--past-due: \"later\""},
		{[]string{"run", "--provider", "webhook", "--webhook-url", "ftp://x", "--brokers", "127.0.0.1:1"}, "--webhook-url: \"ftp://x\""},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := realMain(context.Background(), c.args, &out, &errb)
		msg := errb.String()
		if code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line containing %q", c.args, code, msg, c.want)
		}
	}
}

func TestUnreachableBrokersFailWithinTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String() // accepts connections, never answers
	defer ln.Close()
	for _, args := range [][]string{
		{"onboard", "--user", "u", "--phone", "+14155550123"},
		{"calls"},
		{"scheduler", "--data-dir", t.TempDir()},
	} {
		var errb bytes.Buffer
		start := time.Now()
		code := realMain(context.Background(), append(args, "--brokers", addr, "--timeout", "1s"), io.Discard, &errb)
		if code != 1 || !strings.Contains(errb.String(), addr) || time.Since(start) > 5*time.Second {
			t.Errorf("%s: exit %d after %v, stderr %q; want exit 1 naming %s within the timeout", args[0], code, time.Since(start), errb.String(), addr)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// The newcomer's path: run on the embedded broker, onboard 20 users with
// delays of 2 to 6 s, read 20 calls, each fired at or after its due time, and
// see a pending user's table value as JSON on the query page.
func TestRunOnboardCallsQuery(t *testing.T) {
	broker, web := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- realMain(ctx, []string{"run", "--embedded-addr", broker, "--http", web, "--data-dir", t.TempDir(), "--log-level", "warn", "--default-policy", "none"}, &runOut, io.Discard)
	}()
	common := []string{"--brokers", broker}
	// The web UI line is printed once the processors are assembled.
	for !strings.Contains(runOut.String(), "web UI on") {
		select {
		case code := <-done:
			t.Fatalf("run exited %d: %s", code, runOut.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	for i := 0; i < 20; i++ {
		args := append([]string{"onboard", "--user", fmt.Sprintf("user-%d", i), "--phone", fmt.Sprintf("+1415555%04d", i), "--delay", fmt.Sprintf("%ds", 2+i%5)}, common...)
		if code := realMain(ctx, args, io.Discard, io.Discard); code != 0 {
			t.Fatalf("onboard exited %d", code)
		}
	}
	if code := realMain(ctx, append([]string{"onboard", "--user", "later", "--phone", "+14155550999", "--delay", "1h"}, common...), io.Discard, io.Discard); code != 0 {
		t.Fatalf("onboard exited %d", code)
	}

	var calls bytes.Buffer
	callsDone := make(chan int, 1)
	go func() {
		callsDone <- realMain(ctx, append([]string{"calls", "--limit", "20"}, common...), &calls, io.Discard)
	}()
	select {
	case code := <-callsDone:
		if code != 0 {
			t.Fatalf("calls exited %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no 20 calls within 30s; got %q", calls.String())
	}
	users := map[string]bool{}
	sc := bufio.NewScanner(&calls)
	for sc.Scan() {
		var c struct {
			UserID string    `json:"user_id"`
			DueAt  time.Time `json:"due_at"`
			Fired  time.Time `json:"fired_at"`
		}
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if c.Fired.Before(c.DueAt) {
			t.Fatalf("call fired early: %s", sc.Text())
		}
		users[c.UserID] = true
	}
	if len(users) != 20 {
		t.Fatalf("calls for %d distinct users, want 20", len(users))
	}

	type userState struct {
		UserID  string            `json:"user_id"`
		Pending []json.RawMessage `json:"pending"`
		Fired   []struct {
			CallID string `json:"call_id"`
		} `json:"fired"`
	}
	query := func(user string) (userState, string) {
		resp, err := http.Get("http://" + web + "/query/ivr-scheduler-table/" + user)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		page := html.UnescapeString(string(body))
		var st userState
		if i, j := strings.Index(page, "<pre>"), strings.Index(page, "</pre>"); i >= 0 && j > i {
			_ = json.Unmarshal([]byte(page[i+5:j]), &st)
		}
		return st, page
	}
	if st, page := query("later"); st.UserID != "later" || len(st.Pending) != 1 {
		t.Fatalf("query page does not show the pending user as JSON:\n%s", page)
	}
	// A user whose call went out is shown with it fired, though the tick
	// did not rewrite the user's value.
	if st, page := query("user-0"); st.UserID != "user-0" || len(st.Pending) != 0 || len(st.Fired) != 1 || st.Fired[0].CallID == "" {
		t.Fatalf("query page does not show the fired follow-up as fired:\n%s", page)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exited %d", code)
	}
}
