package main

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"strings"
	"testing"

	"github.com/ivrsched/ivrsched/internal/app"
)

// --opt-out-digit reaches Twilio's callback endpoint (9 by default, off:
// none), and a value that is not one key is refused with what is accepted.
func TestOptOutDigitFlag(t *testing.T) {
	twilio := []string{"--provider", "twilio", "--twilio-from", "+14155550100", "--public-url", "https://ivr.example", "--cps", "1",
		"--twilio-script-url", "https://ivr.example/twiml/{script}"}
	env := func(k string) string {
		return map[string]string{"TWILIO_ACCOUNT_SID": "ACtest", "TWILIO_AUTH_TOKEN": "token"}[k]
	}
	for _, c := range []struct {
		args []string
		want string
	}{{nil, "9"}, {[]string{"--opt-out-digit", "#"}, "#"}, {[]string{"--opt-out-digit", "off"}, ""}} {
		var d dialerFlags
		fs := flag.NewFlagSet("dialer", flag.ContinueOnError)
		d.register(fs)
		if err := fs.Parse(append(twilio, c.args...)); err != nil {
			t.Fatal(err)
		}
		cfg := app.Config{Logger: slog.New(slog.DiscardHandler), CallbackHTTP: "127.0.0.1:0"}
		if err := d.apply(&cfg, env); err != nil {
			t.Fatal(err)
		}
		if cb := cfg.TwilioCallback; cb.OptOutDigit != c.want || cb.ScriptURL != "https://ivr.example/twiml/{script}" {
			t.Errorf("%v: opt-out digit %q, script URL %q; want %q", c.args, cb.OptOutDigit, cb.ScriptURL, c.want)
		}
	}
	t.Setenv("TWILIO_ACCOUNT_SID", "ACtest")
	t.Setenv("TWILIO_AUTH_TOKEN", "token")
	var out, errb bytes.Buffer
	args := append([]string{"dialer", "--callback-http", "127.0.0.1:0", "--opt-out-digit", "99", "--brokers", "127.0.0.1:1"}, twilio...)
	if code := realMain(context.Background(), args, &out, &errb); code != 2 || !strings.Contains(errb.String(), `--opt-out-digit: "99"; want one key of 0-9, * and #, or off`) {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}
