// Package twiliotest is a local fake of Twilio's Calls API for tests. It
// checks each create-call request as Twilio would (path, basic auth, form
// encoding, To, From, Url or Twiml, the status callback) and answers like
// it: 201 with a call sid, 400 and 401 with Twilio's error bodies, 429 above
// the account's calls per second, and 5xx or slow answers on demand. It
// sends status callbacks signed as Twilio signs them.
package twiliotest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/ratelimit"
)

// Options configure the fake.
type Options struct {
	AccountSID, AuthToken string
	// Latency is how long each create-call request takes to answer.
	Latency time.Duration
	// CPS is the account's calls per second (0: no limit); a request above
	// it gets 429, Twilio's error 20429. Burst is how many may come at once
	// (at least 1).
	CPS   float64
	Burst int
	// Invalid are numbers the fake refuses as Twilio refuses a number it
	// cannot call: 400, error 21211, with a message that quotes the number.
	Invalid []string
}

// Call is one create-call request the fake accepted.
type Call struct {
	SID            string
	Form           url.Values
	IdempotencyKey string
	At             time.Time
}

// Server is the fake API. Its URL is the base URL to configure
// (twilio.Config.API).
type Server struct {
	*httptest.Server
	opts   Options
	bucket *ratelimit.Bucket

	mu       sync.Mutex
	calls    []Call
	refused  []string // why requests were refused (400, 401)
	tooMany  int      // 429 answers
	failNext []int    // statuses to answer the next requests with
	client   *http.Client
	news     chan struct{} // a call was accepted
}

// New starts the fake.
func New(opts Options) *Server {
	s := &Server{opts: opts, client: &http.Client{Timeout: 10 * time.Second}, news: make(chan struct{}, 1)}
	if opts.CPS > 0 {
		s.bucket = ratelimit.New(clock.Real{}, opts.CPS, max(opts.Burst, 1))
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// FailNext answers the next create-call requests with these statuses (e.g.
// 503 or 429), one each, before accepting again.
func (s *Server) FailNext(statuses ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = append(s.failNext, statuses...)
}

// Calls returns the calls accepted so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// WaitCalls returns the calls accepted once there are at least n, or an
// error after within.
func (s *Server) WaitCalls(n int, within time.Duration) ([]Call, error) {
	timeout := time.After(within)
	for {
		if calls := s.Calls(); len(calls) >= n {
			return calls, nil
		}
		select {
		case <-s.news:
		case <-timeout:
			return s.Calls(), fmt.Errorf("twiliotest: %d calls within %v, want %d (refused: %v)", len(s.Calls()), within, n, s.Refused())
		}
	}
}

// Refused returns why requests were refused with 400 or 401.
func (s *Server) Refused() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.refused...)
}

// TooMany is how many requests got 429 for exceeding the calls per second.
func (s *Server) TooMany() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tooMany
}

func writeError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg, "more_info": fmt.Sprintf("https://www.twilio.com/docs/errors/%d", code), "status": status})
}

func (s *Server) refuse(w http.ResponseWriter, status, code int, msg string) {
	s.mu.Lock()
	s.refused = append(s.refused, msg)
	s.mu.Unlock()
	writeError(w, status, code, msg)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	path := "/2010-04-01/Accounts/" + s.opts.AccountSID + "/Calls.json"
	if r.URL.Path != path {
		s.refuse(w, http.StatusNotFound, 20404, "The requested resource "+r.URL.Path+" was not found")
		return
	}
	if r.Method != http.MethodPost {
		s.refuse(w, http.StatusMethodNotAllowed, 20004, "Method not allowed")
		return
	}
	if user, pass, ok := r.BasicAuth(); !ok || user != s.opts.AccountSID || pass != s.opts.AuthToken {
		s.refuse(w, http.StatusUnauthorized, 20003, "Authenticate")
		return
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-www-form-urlencoded") {
		s.refuse(w, http.StatusBadRequest, 20001, "content type "+ct+" is not form-encoded")
		return
	}
	if err := r.ParseForm(); err != nil {
		s.refuse(w, http.StatusBadRequest, 20001, "unreadable form: "+err.Error())
		return
	}
	f := r.PostForm
	if msg := check(f); msg != "" {
		s.refuse(w, http.StatusBadRequest, 21205, msg)
		return
	}
	if slices.Contains(s.opts.Invalid, f.Get("To")) {
		s.refuse(w, http.StatusBadRequest, 21211, "The 'To' number "+f.Get("To")+" is not a valid phone number.")
		return
	}
	select { // the API's own time to answer
	case <-time.After(s.opts.Latency):
	case <-r.Context().Done():
		return
	}
	s.mu.Lock()
	if len(s.failNext) > 0 {
		status := s.failNext[0]
		s.failNext = s.failNext[1:]
		s.mu.Unlock()
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
			writeError(w, status, 20429, "Too Many Requests")
			return
		}
		writeError(w, status, 20500, "An internal server error has occurred")
		return
	}
	if s.bucket != nil && !s.bucket.Allow() {
		s.tooMany++
		s.mu.Unlock()
		writeError(w, http.StatusTooManyRequests, 20429, "Too Many Requests")
		return
	}
	sid := "CA" + randomHex(16)
	s.calls = append(s.calls, Call{SID: sid, Form: f, IdempotencyKey: r.Header.Get("Idempotency-Key"), At: time.Now()})
	s.mu.Unlock()
	select {
	case s.news <- struct{}{}:
	default:
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"sid": sid, "account_sid": s.opts.AccountSID, "to": f.Get("To"), "from": f.Get("From"), "status": "queued",
		"uri": strings.TrimSuffix(path, ".json") + "/" + sid + ".json",
	})
}

// check returns why Twilio would refuse a create-call form, or "".
func check(f url.Values) string {
	switch {
	case !strings.HasPrefix(f.Get("To"), "+") || len(f.Get("To")) < 8:
		return "The 'To' number " + f.Get("To") + " is not a valid phone number."
	case f.Get("From") == "":
		return "A 'From' phone number is required."
	case (f.Get("Url") == "") == (f.Get("Twiml") == ""):
		return "Either a 'Url' or 'Twiml' parameter is required (not both)."
	}
	if u := f.Get("Url"); u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return "Url is not a valid URL: " + u
		}
	}
	if cb := f.Get("StatusCallback"); cb != "" {
		if p, err := url.Parse(cb); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return "StatusCallback is not a valid URL: " + cb
		}
		if m := f.Get("StatusCallbackMethod"); m != "" && m != http.MethodPost && m != http.MethodGet {
			return "StatusCallbackMethod must be GET or POST"
		}
	}
	for _, e := range f["StatusCallbackEvent"] {
		switch e {
		case "initiated", "ringing", "answered", "completed":
		default:
			return "StatusCallbackEvent " + e + " is not an event"
		}
	}
	switch f.Get("MachineDetection") {
	case "", "Enable", "DetectMessageEnd":
	default:
		return "MachineDetection must be Enable or DetectMessageEnd"
	}
	return ""
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// SendStatus POSTs a status callback for c to its StatusCallback URL, as
// Twilio does: CallSid, AccountSid, CallStatus, Timestamp (now) and extra,
// signed with the auth token, or with a wrong signature if sign is false.
// It returns the endpoint's HTTP status.
func (s *Server) SendStatus(c Call, callStatus string, extra url.Values, sign bool) (int, error) {
	f := url.Values{"CallSid": {c.SID}, "AccountSid": {s.opts.AccountSID}, "To": {c.Form.Get("To")}, "From": {c.Form.Get("From")},
		"CallbackSource": {"call-progress-events"}, "Timestamp": {time.Now().UTC().Format(time.RFC1123Z)}}
	if callStatus != "" {
		f.Set("CallStatus", callStatus)
	}
	for k, v := range extra {
		f[k] = v
	}
	target := c.Form.Get("StatusCallback")
	return s.post(target, f, sign)
}

// post sends a signed (or badly signed) form to target.
func (s *Server) post(target string, f url.Values, sign bool) (int, error) {
	req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(f.Encode()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	sig := signature(s.opts.AuthToken, target, f)
	if !sign {
		sig = signature("not-"+s.opts.AuthToken, target, f)
	}
	req.Header.Set("X-Twilio-Signature", sig)
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// signature computes X-Twilio-Signature as Twilio documents it, apart from
// the twilio package, so that the fake checks that package's validator
// instead of echoing it: HMAC-SHA1, keyed by the auth token, of the full URL
// followed by each POST parameter's name and value in the order of the
// names (a name's several values in their own order), in base64.
func signature(authToken, fullURL string, form url.Values) string {
	m := hmac.New(sha1.New, []byte(authToken))
	m.Write([]byte(fullURL))
	for _, name := range slices.Sorted(maps.Keys(form)) {
		for _, v := range slices.Sorted(slices.Values(form[name])) {
			m.Write([]byte(name + v))
		}
	}
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// SendGather POSTs the result of a <Gather> of call c to action (the
// Gather's action URL, as the call's TwiML names it), as Twilio does: the
// call's parameters and the keys pressed (Digits), signed with the auth
// token, or with a wrong signature if sign is false. Twilio sends no
// Timestamp with it. It returns the HTTP status and the answer (TwiML).
func (s *Server) SendGather(c Call, action, digits string, sign bool) (int, string, error) {
	f := url.Values{"CallSid": {c.SID}, "AccountSid": {s.opts.AccountSID}, "To": {c.Form.Get("To")}, "From": {c.Form.Get("From")},
		"CallStatus": {"in-progress"}, "Direction": {"outbound-api"}, "ApiVersion": {"2010-04-01"}, "Digits": {digits}, "FinishedOnKey": {""}}
	req, err := http.NewRequest(http.MethodPost, action, strings.NewReader(f.Encode()))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	token := s.opts.AuthToken
	if !sign {
		token = "not-" + token
	}
	req.Header.Set("X-Twilio-Signature", signature(token, action, f))
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = io.Copy(&b, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, b.String(), err
}
