package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/app"
	"github.com/ivrsched/ivrsched/internal/suppress"
)

// The tests of this package run roles, which need a suppression key: they
// get one in the environment unless a test clears it.
func TestMain(m *testing.M) {
	if os.Getenv(suppress.EnvKey) == "" {
		os.Setenv(suppress.EnvKey, "cmd-test-suppression-key-0123456789abcdef")
	}
	os.Exit(m.Run())
}

// A role without a suppression key (or with a short one) does not start,
// and says what to set; on the embedded broker `run` makes one up.
func TestRolesNeedASuppressionKey(t *testing.T) {
	t.Setenv(suppress.EnvKey, "")
	for _, role := range []string{"scheduler", "dialer"} {
		var out, errOut bytes.Buffer
		code := realMain(context.Background(), []string{role, "--brokers", "127.0.0.1:1"}, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), "--suppression-key-file: no suppression key") || !strings.Contains(errOut.String(), suppress.EnvKey) {
			t.Errorf("%s without a key: exit %d, %q", role, code, errOut.String())
		}
	}
	t.Setenv(suppress.EnvKey, "too-short")
	var out, errOut bytes.Buffer
	if code := realMain(context.Background(), []string{"scheduler", "--brokers", "127.0.0.1:1"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "at least 32") {
		t.Errorf("short key: exit %d, %q", code, errOut.String())
	}
	cfg, err := roleConfig("scheduler", []string{"--brokers", "127.0.0.1:1"}, app.Roles{Scheduler: true})
	if err == nil || len(cfg.SuppressionKey) != 0 {
		t.Errorf("roleConfig without a valid key: %v", err)
	}
}

// `suppress` checks its flags before it reaches for Kafka, each error one
// line naming the flag and what is accepted.
func TestSuppressFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"suppress"}, "want a subcommand"},
		{[]string{"suppress", "block"}, `unknown subcommand "block"`},
		{[]string{"suppress", "add"}, "--number: required"},
		{[]string{"suppress", "add", "--number", "4915112345678"}, "--number: "},
		{[]string{"suppress", "add", "--number", "+4915112345678", "--reason", strings.Repeat("x", 257)}, "--reason: 257 bytes; want at most 256"},
		{[]string{"suppress", "add", "--number", "+4915112345678", "--until", "tomorrow"}, "--until: \"tomorrow\" is neither an RFC 3339 time"},
		{[]string{"suppress", "add", "--number", "+4915112345678", "--until", "-1h"}, "--until: -1h0m0s; want a positive duration"},
		{[]string{"suppress", "add", "--number", "+4915112345678", "--until", "2001-01-01T00:00:00Z"}, "is not in the future"},
		{[]string{"suppress", "check", "--number", "+4915112345678", "--reason", "x"}, "flag provided but not defined: -reason"},
	} {
		var out, errOut bytes.Buffer
		code := realMain(context.Background(), c.args, &out, &errOut)
		if code != 2 || !strings.Contains(errOut.String(), c.want) || strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("%v: exit %d, %q; want exit 2 and one line with %q", c.args, code, errOut.String(), c.want)
		}
	}
	t.Setenv(suppress.EnvKey, "")
	var out, errOut bytes.Buffer
	if code := realMain(context.Background(), []string{"suppress", "list"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "no suppression key") {
		t.Errorf("list without a key: exit %d, %q", code, errOut.String())
	}
}

func TestParseUntil(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	if got, err := parseUntil("720h", now); err != nil || !got.Equal(now.Add(720*time.Hour)) {
		t.Errorf("720h: %v, %v", got, err)
	}
	if got, err := parseUntil("2027-01-01T00:00:00Z", now); err != nil || got.Year() != 2027 {
		t.Errorf("RFC 3339: %v, %v", got, err)
	}
}
