package main

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/ivrsched/ivrsched/internal/app"
	"github.com/ivrsched/ivrsched/internal/providers/webhook"
)

func TestDialerFlagErrors(t *testing.T) {
	t.Setenv("TWILIO_ACCOUNT_SID", "")
	t.Setenv("TWILIO_AUTH_TOKEN", "")
	t.Setenv(webhookSecretEnv, "")
	b := []string{"--brokers", "127.0.0.1:1"}
	twilio := []string{"dialer", "--provider", "twilio", "--callback-http", "127.0.0.1:0", "--twilio-from", "+14155550100", "--public-url", "https://ivr.example", "--cps", "1"}
	cases := []struct {
		env  bool // with Twilio credentials in the environment
		args []string
		want string
	}{
		{false, []string{"dialer", "--max-in-flight", "0"}, "--max-in-flight: 0"},
		{false, []string{"dialer", "--cps", "-1"}, "--cps: -1"},
		{false, []string{"dialer", "--call-deadline", "1s"}, "--call-deadline: 1s is shorter than --call-timeout 10s"},
		{false, []string{"dialer", "--call-timeout", "0s"}, "--call-timeout: 0s"},
		{false, []string{"scheduler", "--cps", "5"}, "-cps"}, // the scheduler has no dialer flags
		{false, []string{"dialer", "--twilio-from", "+14155550100"}, "--twilio-from: set, but --provider is log"},
		{false, []string{"dialer", "--provider", "fax"}, `--provider: "fax"; want log, webhook or twilio`},
		{false, []string{"dialer", "--public-url", "https://ivr.example"}, "--callback-http: empty, but --public-url is set"},
		{false, []string{"run", "--public-url", "ivr.example"}, `--public-url: "ivr.example"`},
		{false, []string{"run", "--provider", "webhook", "--webhook-url", "https://calls.example", "--public-url", "https://ivr.example", "--callback-http", "127.0.0.1:0"}, "IVRSCHED_WEBHOOK_SECRET, which is not set"},
		{false, twilio, "--provider: twilio: TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN must both be set in the environment"},
		{false, append(twilio, "--twilio-credentials", "/nonexistent/twilio.env"), "--twilio-credentials: twilio: credentials file"},
		{true, []string{"dialer", "--provider", "twilio", "--callback-http", "127.0.0.1:0", "--public-url", "https://ivr.example", "--cps", "1"}, "--twilio-from: required"},
		{true, []string{"dialer", "--provider", "twilio", "--twilio-from", "+14155550100", "--cps", "1"}, "--public-url: required with --provider twilio"},
		{true, []string{"dialer", "--provider", "twilio", "--callback-http", "127.0.0.1:0", "--twilio-from", "+14155550100", "--public-url", "https://ivr.example"}, "--cps: required with --provider twilio"},
		{true, append(twilio, "--twilio-amd", "maybe"), `--twilio-amd: "maybe"`},
		{false, []string{"dialer", "--script-url-hosts", "ivr.example,https://evil.example/x"}, `--script-url-hosts: "https://evil.example/x" is not a host`},
		{false, []string{"dialer", "--provider", "webhook", "--webhook-url", "http://calls.example/ivr"}, `--webhook-url: "http://calls.example/ivr" is http; want https (http only on loopback)`},
		{true, append(twilio, "--twilio-api", "http://api.example"), `--twilio-api: "http://api.example" is http; want https`},
		{true, append(twilio, "--twilio-script-url", "http://ivr.example/twiml/{script}"), `--twilio-script-url: "http://ivr.example/twiml/{script}" is http; want https`},
		{true, append(twilio[:len(twilio):len(twilio)], "--twilio-from", "14155550100"), "not an E.164 number"},
	}
	for _, c := range cases {
		if c.env {
			t.Setenv("TWILIO_ACCOUNT_SID", "ACtest")
			t.Setenv("TWILIO_AUTH_TOKEN", "token")
		} else {
			t.Setenv("TWILIO_ACCOUNT_SID", "")
			t.Setenv("TWILIO_AUTH_TOKEN", "")
		}
		var out, errb bytes.Buffer
		code := realMain(context.Background(), append(c.args, b...), &out, &errb)
		msg := errb.String()
		if code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line containing %q", c.args, code, msg, c.want)
		}
	}
}

// A script is a name unless the flags allow TwiML or URLs of listed hosts;
// the provider gets those rules.
func TestScriptFlagsReachTheProvider(t *testing.T) {
	var d dialerFlags
	fs := flag.NewFlagSet("dialer", flag.ContinueOnError)
	d.register(fs)
	if err := fs.Parse([]string{"--provider", "webhook", "--webhook-url", "https://calls.example/ivr",
		"--allow-inline-scripts", "--script-url-hosts", "IVR.example, scripts.example:8443"}); err != nil {
		t.Fatal(err)
	}
	cfg := app.Config{Logger: slog.New(slog.DiscardHandler)}
	if err := d.apply(&cfg, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	wh, ok := cfg.Provider.(*webhook.Webhook)
	if !ok || !wh.Scripts.Inline || !slices.Equal(wh.Scripts.URLHosts, []string{"ivr.example", "scripts.example:8443"}) {
		t.Fatalf("provider %#v", cfg.Provider)
	}
}

// A provider's endpoint is https, or http on loopback only; a webhook
// without a secret runs, with a warning for the log and /readyz.
func TestProviderEndpointsAndTheWebhookSecret(t *testing.T) {
	apply := func(secret string, args ...string) (app.Config, error) {
		var d dialerFlags
		fs := flag.NewFlagSet("dialer", flag.ContinueOnError)
		d.register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		cfg := app.Config{Logger: slog.New(slog.DiscardHandler)}
		err := d.apply(&cfg, func(string) string { return secret })
		return cfg, err
	}
	for _, u := range []string{"http://127.0.0.1:8080/ivr", "http://localhost/ivr", "http://[::1]:80/ivr", "https://calls.example/ivr"} {
		if _, err := apply("s3cret", "--provider", "webhook", "--webhook-url", u); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	cfg, err := apply("", "--provider", "webhook", "--webhook-url", "https://calls.example/ivr")
	if err != nil || len(cfg.Warnings) != 1 || !strings.Contains(cfg.Warnings[0], webhookSecretEnv) {
		t.Fatalf("no secret: %v, warnings %q", err, cfg.Warnings)
	}
	if cfg, _ := apply("s3cret", "--provider", "webhook", "--webhook-url", "https://calls.example/ivr"); len(cfg.Warnings) != 0 {
		t.Fatalf("with a secret: warnings %q", cfg.Warnings)
	}
}
