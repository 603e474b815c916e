package main

import (
	"flag"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/ivrsched/ivrsched/internal/app"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
	"github.com/ivrsched/ivrsched/internal/providers/twilio"
	"github.com/ivrsched/ivrsched/internal/providers/webhook"
)

// webhookSecretEnv names the environment variable of the webhook's secret.
const webhookSecretEnv = "IVRSCHED_WEBHOOK_SECRET"

// dialerFlags are the flags of the commands that run the dialer.
type dialerFlags struct {
	provider     string
	webhookURL   string
	callTimeout  time.Duration
	callDeadline time.Duration
	maxInFlight  int
	cps          float64
	publicURL    string

	twilioFrom        string
	twilioCredentials string
	twilioAPI         string
	twilioScriptURL   string
	twilioAMD         string
	optOutDigit       string

	inlineScripts  bool
	scriptURLHosts string
}

func (d *dialerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.provider, "provider", "log", "how the dialer places calls: log (only logs them), webhook (POST to --webhook-url; signed with $"+webhookSecretEnv+" if set) or twilio (Twilio's Calls API; credentials from $TWILIO_ACCOUNT_SID and $TWILIO_AUTH_TOKEN or --twilio-credentials)")
	fs.StringVar(&d.webhookURL, "webhook-url", "", "endpoint of the webhook provider: https (http only on loopback)")
	fs.DurationVar(&d.callTimeout, "call-timeout", 10*time.Second, "how long one request to the provider may take")
	fs.DurationVar(&d.callDeadline, "call-deadline", 2*time.Minute, "how long placing one call may take from its first request, 429 and 5xx answers retried with backoff and Retry-After; then it fails")
	fs.IntVar(&d.maxInFlight, "max-in-flight", 100, "calls this process places at a time")
	fs.Float64Var(&d.cps, "cps", 0, "calls per second of the provider account, for the whole deployment: each dialer process takes the share of the partitions it owns (0: no limit)")
	fs.StringVar(&d.publicURL, "public-url", "", "this process's status callback listener (--callback-http) as the provider reaches it, e.g. https://ivr.example.com: status callbacks go to <public-url>/callbacks/<provider> and their signatures are checked against it")
	fs.StringVar(&d.twilioFrom, "twilio-from", "", "twilio: the caller id, a Twilio number in E.164 form like +14155550100")
	fs.StringVar(&d.twilioCredentials, "twilio-credentials", "", "twilio: a file with TWILIO_ACCOUNT_SID=... and TWILIO_AUTH_TOKEN=... lines (default: those environment variables)")
	fs.StringVar(&d.twilioAPI, "twilio-api", twilio.DefaultAPI, "twilio: base URL of the Calls API (or of a compatible one): https (http only on loopback)")
	fs.StringVar(&d.twilioScriptURL, "twilio-script-url", "", "twilio: TwiML URL of a script named by its action, {script} replaced by the name, e.g. https://ivr.example.com/twiml/{script}")
	fs.BoolVar(&d.inlineScripts, "allow-inline-scripts", false, "pass on a script that is TwiML itself (\"<Response>…\"): whoever writes to the onboarding topic then chooses what the calls say and whom they dial; URLs in it must be on --script-url-hosts (default: a script is a name only)")
	fs.StringVar(&d.scriptURLHosts, "script-url-hosts", "", "comma-separated hosts (host or host:port) of the https URLs a script may be, used as is (default: none, a script is a name only)")
	fs.StringVar(&d.twilioAMD, "twilio-amd", "off", "twilio: answering-machine detection: off, enable or detect-message-end")
	fs.StringVar(&d.optOutDigit, "opt-out-digit", "9", "twilio: the key a recipient presses on a script's <Gather> whose action is <public-url>"+twilio.GatherPath+"?call_id=…&user_id=… to opt out: the number the call was placed to goes on the do-not-call list; one of 0-9, * and #, or off")
}

// httpURL checks an http(s) URL flag.
func httpURL(name, v, example string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return badFlag(name, "%q; want an http(s) URL like %s", v, example)
	}
	return nil
}

// httpsURL checks the URL flag of an endpoint that calls go to or scripts
// come from: https, or http on loopback only (a local proxy or a test),
// since in clear anyone on the path could read the numbers or change what
// the calls do.
func httpsURL(name, v, example string) error {
	if err := httpURL(name, v, example); err != nil {
		return err
	}
	u, _ := url.Parse(v)
	if u.Scheme == "https" || u.Hostname() == "localhost" {
		return nil
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsLoopback() {
		return nil
	}
	return badFlag(name, "%q is http; want https (http only on loopback), like %s", v, example)
}

// apply checks the flags and sets the dialer's part of cfg; cfg.CallbackHTTP
// is the listener the status callbacks are served on.
func (d *dialerFlags) apply(cfg *app.Config, getenv func(string) string) error {
	switch {
	case d.callTimeout <= 0:
		return badFlag("call-timeout", "%v; want a positive duration like 10s", d.callTimeout)
	case d.callDeadline < d.callTimeout:
		return badFlag("call-deadline", "%v is shorter than --call-timeout %v", d.callDeadline, d.callTimeout)
	case d.maxInFlight < 1 || d.maxInFlight > 100000:
		return badFlag("max-in-flight", "%d; want 1 to 100000", d.maxInFlight)
	case d.cps < 0 || d.cps > 100000:
		return badFlag("cps", "%v; want 0 (no limit) to 100000 calls per second", d.cps)
	}
	if d.publicURL != "" {
		if err := httpURL("public-url", d.publicURL, "https://ivr.example.com"); err != nil {
			return err
		}
		if u, _ := url.Parse(d.publicURL); u.RawQuery != "" || u.Fragment != "" {
			return badFlag("public-url", "%q has a query or fragment; want the base URL of the web server", d.publicURL)
		}
		if cfg.CallbackHTTP == "" {
			return badFlag("callback-http", "empty, but --public-url is set: the status callbacks have a listener of their own (--http serves only probes and metrics); set --callback-http, e.g. 0.0.0.0:9096, and have the proxy forward /callbacks/ to it")
		}
	}
	if d.provider != "twilio" {
		for name, v := range map[string]string{"twilio-from": d.twilioFrom, "twilio-credentials": d.twilioCredentials, "twilio-script-url": d.twilioScriptURL} {
			if v != "" {
				return badFlag(name, "set, but --provider is %s; add --provider twilio", d.provider)
			}
		}
	}
	if d.provider != "webhook" && d.webhookURL != "" {
		return badFlag("webhook-url", "set, but --provider is %s; add --provider webhook", d.provider)
	}
	scripts, err := d.scripts()
	if err != nil {
		return err
	}
	client := provider.HTTPClient(d.maxInFlight)
	base := strings.TrimRight(d.publicURL, "/")
	switch d.provider {
	case "log":
		cfg.Provider = provider.Log{Logger: cfg.Logger.With("role", "dialer")}
	case "webhook":
		if err := httpsURL("webhook-url", d.webhookURL, "https://calls.example/ivr"); err != nil {
			return err
		}
		secret := []byte(getenv(webhookSecretEnv))
		if len(secret) == 0 {
			cfg.Warnings = append(cfg.Warnings, "the webhook's requests are not signed: $"+webhookSecretEnv+
				" is not set, so its endpoint cannot tell them from anyone's; set it (see --provider)")
		}
		wh := &webhook.Webhook{URL: d.webhookURL, Secret: secret, Scripts: scripts, Client: client}
		if d.publicURL != "" {
			if len(secret) == 0 {
				return badFlag("public-url", "the webhook's status callbacks are signed with $%s, which is not set", webhookSecretEnv)
			}
			wh.CallbackURL = base + webhook.CallbackPath
			cfg.WebhookCallback = &webhook.Callback{Secret: secret, CallbackEndpoint: provider.CallbackEndpoint{Logger: cfg.Logger.With("role", "dialer")}}
		}
		cfg.Provider = wh
	case "twilio":
		tc := twilio.Config{From: d.twilioFrom, API: d.twilioAPI, PublicURL: d.publicURL, ScriptURL: d.twilioScriptURL, Scripts: scripts, Client: client}
		if tc.AccountSID, tc.AuthToken, err = twilio.LoadCredentials(d.twilioCredentials, getenv); err != nil {
			name := "provider"
			if d.twilioCredentials != "" {
				name = "twilio-credentials"
			}
			return badFlag(name, "%v", err)
		}
		switch {
		case d.twilioFrom == "":
			return badFlag("twilio-from", "required with --provider twilio: the caller id, an E.164 number like +14155550100")
		case d.publicURL == "":
			return badFlag("public-url", "required with --provider twilio: where Twilio sends status callbacks, e.g. https://ivr.example.com")
		case d.cps == 0:
			return badFlag("cps", "required with --provider twilio: the account's calls per second (1 unless Twilio raised it)")
		}
		if err := httpsURL("twilio-api", d.twilioAPI, twilio.DefaultAPI); err != nil {
			return err
		}
		if d.twilioScriptURL != "" {
			if err := httpsURL("twilio-script-url", d.twilioScriptURL, "https://ivr.example.com/twiml/{script}"); err != nil {
				return err
			}
		}
		switch d.twilioAMD {
		case "off":
		case "enable":
			tc.MachineDetection = twilio.MachineDetectionEnable
		case "detect-message-end":
			tc.MachineDetection = twilio.MachineDetectionMessageEnd
		default:
			return badFlag("twilio-amd", "%q; want off, enable or detect-message-end", d.twilioAMD)
		}
		p, err := twilio.New(tc)
		if err != nil {
			return badFlag("twilio-from", "%v", err)
		}
		cfg.Provider = p
		digit, err := optOutDigit(d.optOutDigit)
		if err != nil {
			return err
		}
		cfg.TwilioCallback = &twilio.Callback{AuthToken: tc.AuthToken, PublicURL: d.publicURL, OptOutDigit: digit, ScriptURL: d.twilioScriptURL,
			CallbackEndpoint: provider.CallbackEndpoint{Logger: cfg.Logger.With("role", "dialer")}}
	default:
		return badFlag("provider", "%q; want log, webhook or twilio", d.provider)
	}
	cfg.CallTimeout, cfg.CallDeadline = d.callTimeout, d.callDeadline
	cfg.MaxInFlight, cfg.CPS = d.maxInFlight, d.cps
	return nil
}

// scripts reads --allow-inline-scripts and --script-url-hosts.
func (d *dialerFlags) scripts() (provider.Scripts, error) {
	s := provider.Scripts{Inline: d.inlineScripts}
	for _, h := range strings.Split(d.scriptURLHosts, ",") {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == "" {
			continue
		}
		if u, err := url.Parse("https://" + h); err != nil || u.Host != h || u.Hostname() == "" {
			return s, badFlag("script-url-hosts", "%q is not a host; want names like ivr.example.com or ivr.example.com:8443, without https:// or a path", h)
		}
		s.URLHosts = append(s.URLHosts, h)
	}
	return s, nil
}

// optOutDigit reads --opt-out-digit: one key of a phone's keypad, or off
// ("").
func optOutDigit(v string) (string, error) {
	if v == "off" {
		return "", nil
	}
	if len(v) != 1 || !strings.Contains("0123456789*#", v) {
		return "", badFlag("opt-out-digit", "%q; want one key of 0-9, * and #, or off", v)
	}
	return v, nil
}
