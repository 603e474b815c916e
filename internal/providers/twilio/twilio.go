// Package twilio is a provider for Twilio's Programmable Voice Calls API
// (and APIs compatible with it): it places a call with the API's
// form-encoded POST, and takes the statuses Twilio reports on the status
// callback endpoint (/callbacks/twilio), checking Twilio's request
// signature.
package twilio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

// DefaultAPI is the base URL of Twilio's REST API.
const DefaultAPI = "https://api.twilio.com"

// Machine detection modes (the Calls API's MachineDetection).
const (
	MachineDetectionOff    = ""
	MachineDetectionEnable = "Enable"
	// DetectMessageEnd waits for the greeting's end (to leave a message).
	MachineDetectionMessageEnd = "DetectMessageEnd"
)

// Config configures the provider.
type Config struct {
	// AccountSID and AuthToken authenticate the API requests (basic auth)
	// and sign Twilio's callbacks. See LoadCredentials.
	AccountSID, AuthToken string
	// From is the caller id: a Twilio number or verified caller id (E.164).
	From string
	// API is the base URL of the API; empty means DefaultAPI.
	API string
	// PublicURL is ivrsched's web server as Twilio reaches it, e.g.
	// https://ivr.example.com (behind a proxy: the proxy's URL). Status
	// callbacks go to PublicURL + CallbackPath, and their signatures are
	// checked against that URL.
	PublicURL string
	// ScriptURL is the TwiML URL of a script named by its action's
	// ivr_script, with {script} replaced by the name (query-escaped), e.g.
	// https://ivr.example.com/twiml/{script}; {call_id} and {user_id} are
	// replaced by the call's, for a script that offers to opt out (its
	// Gather's action names them, GatherPath).
	ScriptURL string
	// Scripts says whether an ivr_script may be TwiML itself ("<…") or a
	// URL, used as is; by default it may be neither (a name only).
	Scripts provider.Scripts
	// MachineDetection is off (""), Enable or DetectMessageEnd; when on,
	// detection runs asynchronously and reports to the status callback.
	MachineDetection string
	Client           *http.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Provider places calls through the Calls API.
//
// Twilio's Calls API takes no idempotency key: a request that Twilio
// accepted but whose answer was lost (a timeout, a 5xx after acceptance, or
// a crash of the dialer between the request and recording its answer) may
// place the call twice when it is sent again. The call id goes along in the
// Idempotency-Key header (for proxies and fakes that honour it) and in the
// status callback URL.
//
// Place is safe for concurrent use.
type Provider struct {
	cfg      Config
	endpoint string
	callback string
}

// ErrTwilio is wrapped by the errors of a failed request.
var ErrTwilio = errors.New("twilio")

// New checks the configuration and returns the provider.
func New(cfg Config) (*Provider, error) {
	if cfg.API == "" {
		cfg.API = DefaultAPI
	}
	switch {
	case cfg.AccountSID == "" || cfg.AuthToken == "":
		return nil, fmt.Errorf("%w: no account SID or auth token", ErrTwilio)
	case !strings.HasPrefix(cfg.From, "+") && !strings.HasPrefix(cfg.From, "client:") && !strings.HasPrefix(cfg.From, "sip:"):
		return nil, fmt.Errorf("%w: caller id %q is not an E.164 number", ErrTwilio, cfg.From)
	case cfg.PublicURL == "":
		return nil, fmt.Errorf("%w: no public URL for status callbacks", ErrTwilio)
	}
	switch cfg.MachineDetection {
	case MachineDetectionOff, MachineDetectionEnable, MachineDetectionMessageEnd:
	default:
		return nil, fmt.Errorf("%w: machine detection %q (want Enable or DetectMessageEnd)", ErrTwilio, cfg.MachineDetection)
	}
	if cfg.Client == nil {
		cfg.Client = http.DefaultClient
	}
	api := strings.TrimRight(cfg.API, "/")
	return &Provider{
		cfg:      cfg,
		endpoint: api + "/2010-04-01/Accounts/" + url.PathEscape(cfg.AccountSID) + "/Calls.json",
		callback: strings.TrimRight(cfg.PublicURL, "/") + CallbackPath,
	}, nil
}

func (p *Provider) now() time.Time {
	if p.cfg.Now != nil {
		return p.cfg.Now()
	}
	return time.Now()
}

// StatusCallbackURL is where Twilio reports the statuses of call c: the
// callback endpoint with the call and user ids (part of what Twilio signs).
func (p *Provider) StatusCallbackURL(c *pb.IVRCall) string {
	return p.callback + "?" + url.Values{"call_id": {c.GetCallId()}, "user_id": {c.GetUserId()}}.Encode()
}

// script says what the call plays: a TwiML URL or TwiML itself.
func (p *Provider) script(c *pb.IVRCall) (key, value string, err error) {
	s := strings.TrimSpace(c.GetAction().GetIvrScript())
	kind, err := p.cfg.Scripts.Check(s)
	switch {
	case err != nil:
		return "", "", fmt.Errorf("%w: %w", ErrTwilio, err)
	case kind == provider.ScriptInline:
		return "Twiml", s, nil
	case kind == provider.ScriptURL:
		return "Url", s, nil
	case s != "" && p.cfg.ScriptURL != "":
		return "Url", ScriptURLFor(p.cfg.ScriptURL, s, c.GetCallId(), c.GetUserId()), nil
	}
	return "", "", fmt.Errorf("%w: %w: no script URL is configured (--twilio-script-url) for script %q", ErrTwilio, provider.ErrScript, s)
}

// Form is the Calls API request that places c, or why c is not placed
// (its script or its number is refused: provider.ErrScript,
// provider.ErrDestination).
func (p *Provider) Form(c *pb.IVRCall) (url.Values, error) {
	if err := provider.CheckDestination(c.GetPhone()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTwilio, err)
	}
	k, v, err := p.script(c)
	if err != nil {
		return nil, err
	}
	cb := p.StatusCallbackURL(c)
	f := url.Values{
		"To":                   {c.GetPhone()},
		"From":                 {p.cfg.From},
		k:                      {v},
		"StatusCallback":       {cb},
		"StatusCallbackMethod": {http.MethodPost},
		"StatusCallbackEvent":  {"initiated", "ringing", "answered", "completed"},
	}
	if p.cfg.MachineDetection != MachineDetectionOff {
		f.Set("MachineDetection", p.cfg.MachineDetection)
		f.Set("AsyncAmd", "true")
		f.Set("AsyncAmdStatusCallback", cb)
		f.Set("AsyncAmdStatusCallbackMethod", http.MethodPost)
	}
	return f, nil
}

// apiError is the body of the API's error answers.
type apiError struct {
	Code     int    `json:"code"`
	Message  string `json:"message"`
	MoreInfo string `json:"more_info"`
}

// Place creates the call. A 201 is a placed call (not final: its statuses
// follow on the callback); 429 and 5xx answers, and requests without an
// answer, are retryable; other answers fail the call with Twilio's error
// code and message.
func (p *Provider) Place(ctx context.Context, c *pb.IVRCall) (provider.Result, error) {
	form, err := p.Form(c)
	if err != nil {
		return provider.Result{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return provider.Result{}, fmt.Errorf("%w: %w", ErrTwilio, err)
	}
	req.SetBasicAuth(p.cfg.AccountSID, p.cfg.AuthToken)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", c.GetCallId())
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return provider.Result{}, fmt.Errorf("%w: %w", ErrTwilio, &provider.RetryableError{Err: err})
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		var e apiError
		if json.Unmarshal(body, &e) == nil && e.Message != "" {
			body = fmt.Appendf(nil, "%d %s", e.Code, e.Message)
		}
		return provider.Result{}, fmt.Errorf("%w: %w", ErrTwilio, provider.StatusError(resp, body, p.now()))
	}
	var created struct {
		SID    string `json:"sid"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(body, &created); err != nil || created.SID == "" {
		return provider.Result{}, fmt.Errorf("%w: status %d without a call sid: %.200s", ErrTwilio, resp.StatusCode, provider.Text(string(body)))
	}
	return provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED, ProviderCallID: created.SID, Detail: created.Status}, nil
}
