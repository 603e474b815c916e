package twilio

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"net"
	"net/http"
	"net/mail"
	"net/url"
	"slices"
	"strings"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

// CallbackPath is where ivrsched's web server takes Twilio's status
// callbacks.
const CallbackPath = "/callbacks/twilio"

// SignatureHeader is the header of Twilio's request signature.
const SignatureHeader = "X-Twilio-Signature"

// Signature is Twilio's signature of a request to fullURL with the POST
// parameters params: the base64 HMAC-SHA1, keyed with the auth token, of the
// URL followed by each parameter's name and value, sorted by name (and by
// value for a repeated name).
func Signature(authToken, fullURL string, params url.Values) string {
	m := hmac.New(sha1.New, []byte(authToken))
	m.Write([]byte(fullURL))
	names := make([]string, 0, len(params))
	for k := range params {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		vs := slices.Clone(params[k])
		slices.Sort(vs)
		for _, v := range vs {
			m.Write([]byte(k))
			m.Write([]byte(v))
		}
	}
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Callback is the status callback endpoint of the Twilio provider.
//
// Twilio POSTs the call's statuses (initiated, ringing, in-progress,
// completed, busy, no-answer, failed, canceled) and the result of
// answering-machine detection (AnsweredBy) to the URL the call was created
// with: PublicURL + CallbackPath + ?call_id=...&user_id=... The signature is
// checked against that URL as Twilio saw it (PublicURL, not the address a
// proxy forwarded to), with its default port or without, as Twilio's
// validators accept. A request without a valid X-Twilio-Signature, a
// call-progress status without its Timestamp (RFC 2822), or one whose
// Timestamp is more than MaxAge away from now, gets 403 and is counted;
// an answering-machine result, which Twilio sends without a Timestamp, is
// taken without. A verified status is published (StatusSink) before the
// answer, 204; one already published is answered 204 and not published
// again (CallbackEndpoint.Publish).
//
// ServeHTTP is safe for concurrent use.
type Callback struct {
	AuthToken string
	PublicURL string
	// MaxAge bounds the age of a callback's Timestamp; 0 means 10 minutes.
	MaxAge time.Duration
	// OptOutDigit is the key a recipient presses on a script's Gather to
	// opt out (GatherPath); empty: no Gather result is an opt-out.
	// OptOutSay is said before the call ends then (DefaultOptOutSay if
	// empty); ScriptURL locates the script a Gather's next names
	// (Config.ScriptURL).
	OptOutDigit, OptOutSay, ScriptURL string
	provider.CallbackEndpoint
}

// verified reads a POSTed form of at most 64 KiB sent to path and checks
// Twilio's signature of it; it answers the request itself and returns
// false when either fails.
func (c *Callback) verified(w http.ResponseWriter, r *http.Request, path, wrongMethod string) bool {
	if r.Method != http.MethodPost {
		http.Error(w, wrongMethod, http.StatusMethodNotAllowed)
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "unreadable form", http.StatusBadRequest)
		return false
	}
	full := strings.TrimRight(c.PublicURL, "/") + path
	if r.URL.RawQuery != "" {
		full += "?" + r.URL.RawQuery
	}
	if !signed(c.AuthToken, full, r.PostForm, r.Header.Get(SignatureHeader)) {
		c.Refuse(w, r, "invalid or missing signature")
		return false
	}
	return true
}

func (c *Callback) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !c.verified(w, r, CallbackPath, "POST a signed status") {
		return
	}
	maxAge := c.MaxAge
	if maxAge <= 0 {
		maxAge = 10 * time.Minute
	}
	switch ts := r.PostForm.Get("Timestamp"); {
	case ts == "" && r.PostForm.Get("CallStatus") != "":
		c.Refuse(w, r, "no Timestamp")
		return
	case ts != "":
		at, err := mail.ParseDate(ts) // RFC 2822: "Mon, 1 Jun 2026 ..." too
		if d := c.Time().Sub(at); err != nil || d > maxAge || d < -maxAge {
			c.Refuse(w, r, "stale or unreadable Timestamp "+ts)
			return
		}
	}
	q := r.URL.Query()
	st, ok := status(r.PostForm)
	st.CallID, st.UserID, st.At = q.Get("call_id"), q.Get("user_id"), c.Time()
	if !ok || st.CallID == "" || st.UserID == "" {
		c.Invalid(w, "want call_id and user_id in the URL, and a CallStatus or AnsweredBy")
		return
	}
	c.Publish(w, r, st)
}

// signed says whether got is Twilio's signature of a request to fullURL
// with params: over fullURL as it is, or with its scheme's default port
// added or removed, as Twilio's own request validators accept (what
// Twilio signs depends on how the URL was written).
func signed(authToken, fullURL string, params url.Values, got string) bool {
	if got == "" {
		return false
	}
	for _, u := range []string{fullURL, otherPort(fullURL)} {
		if u != "" && hmac.Equal([]byte(got), []byte(Signature(authToken, u, params))) {
			return true
		}
	}
	return false
}

// otherPort is rawURL with its scheme's default port (443, 80) removed if
// it has it, or added if it has no port; "" for any other URL.
func otherPort(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	def := map[string]string{"https": "443", "http": "80"}[u.Scheme]
	switch port := u.Port(); {
	case def == "":
		return ""
	case port == "":
		u.Host = net.JoinHostPort(u.Hostname(), def)
	case port == def:
		u.Host = strings.TrimSuffix(u.Host, ":"+port)
	default:
		return ""
	}
	return u.String()
}

// status reads a callback's parameters: CallStatus, or for an
// answering-machine detection callback AnsweredBy alone.
func status(f url.Values) (provider.Status, bool) {
	s := provider.Status{ProviderCallID: f.Get("CallSid")}
	machine := strings.HasPrefix(f.Get("AnsweredBy"), "machine") || f.Get("AnsweredBy") == "fax"
	var details []string
	for _, k := range []string{"CallStatus", "AnsweredBy", "CallDuration", "ErrorCode", "ErrorMessage", "SipResponseCode"} {
		if v := f.Get(k); v != "" {
			details = append(details, k+"="+v)
		}
	}
	s.Detail = strings.Join(details, " ")
	switch f.Get("CallStatus") {
	case "queued", "initiated":
		s.Outcome = pb.Outcome_OUTCOME_PLACED
	case "ringing":
		s.Outcome = pb.Outcome_OUTCOME_RINGING
	case "in-progress":
		s.Outcome = pb.Outcome_OUTCOME_ANSWERED
	case "completed":
		s.Outcome, s.Final = pb.Outcome_OUTCOME_ANSWERED, true
	case "busy":
		s.Outcome, s.Final = pb.Outcome_OUTCOME_BUSY, true
	case "no-answer":
		s.Outcome, s.Final = pb.Outcome_OUTCOME_NO_ANSWER, true
	case "failed":
		s.Outcome, s.Final = pb.Outcome_OUTCOME_FAILED, true
	case "canceled":
		s.Outcome, s.Final = pb.Outcome_OUTCOME_CANCELED, true
	case "":
		if f.Get("AnsweredBy") == "" {
			return s, false
		}
		s.Outcome = pb.Outcome_OUTCOME_ANSWERED // a person (or unknown) answered
	default:
		return s, false
	}
	if machine && s.Outcome == pb.Outcome_OUTCOME_ANSWERED {
		s.Outcome = pb.Outcome_OUTCOME_MACHINE
	}
	return s, true
}
