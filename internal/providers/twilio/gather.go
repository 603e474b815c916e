package twilio

import (
	"encoding/xml"
	"net/http"
	"net/url"
	"strings"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

// GatherPath is where ivrsched takes the result of a <Gather> that offers
// the recipient to opt out: a script's TwiML names it as the Gather's
// action, with the call's ids (which the script's URL may receive, see
// Config.ScriptURL):
//
//	<Gather numDigits="1" action="https://ivr.example.com/callbacks/twilio/gather?call_id=…&amp;user_id=…&amp;next=…">
//
// Twilio POSTs the keys pressed (Digits) and the call's CallSid there,
// signed like its status callbacks.
const GatherPath = CallbackPath + "/gather"

// maxID bounds the ids a Gather's URL names (codec.MaxIDBytes).
const maxID = 256

// DefaultOptOutSay is what a recipient who opted out hears before the call
// ends, unless Callback.OptOutSay says otherwise.
const DefaultOptOutSay = "You will not be called again. Goodbye."

// Gather is the handler of GatherPath. A request without a valid
// X-Twilio-Signature (over PublicURL + GatherPath and its query) gets 403
// and is counted; one without call_id and user_id (each at most 256
// bytes), or with more than 32 Digits, 400. Digits equal to OptOutDigit are
// an opt-out: a final OUTCOME_OPTED_OUT status of the call (with the
// CallSid, which the dialer checks against the one it recorded) is
// published, then the answer is TwiML that says OptOutSay and hangs up.
// The dialer lists the number it placed the call to; nothing in the
// request names a number. Any other keys continue the call with the script
// named by the URL's next, through ScriptURL (a name only), or end it.
// Twilio sends no Timestamp with a Gather: a replayed request publishes
// the same status, which changes nothing once the call's outcome is
// recorded.
func (c *Callback) Gather() http.Handler { return http.HandlerFunc(c.serveGather) }

func (c *Callback) serveGather(w http.ResponseWriter, r *http.Request) {
	if !c.verified(w, r, GatherPath, "POST a signed Gather result") {
		return
	}
	q := r.URL.Query()
	callID, userID, digits := q.Get("call_id"), q.Get("user_id"), r.PostForm.Get("Digits")
	if callID == "" || userID == "" || len(callID) > maxID || len(userID) > maxID || len(digits) > 32 {
		c.Invalid(w, "want call_id and user_id (at most 256 bytes each) in the URL, and at most 32 Digits")
		return
	}
	if c.OptOutDigit != "" && digits == c.OptOutDigit {
		st := provider.Status{CallID: callID, UserID: userID, Outcome: pb.Outcome_OUTCOME_OPTED_OUT, Final: true,
			ProviderCallID: r.PostForm.Get("CallSid"), Detail: "Digits=" + digits, At: c.Time()}
		if err := c.Store(r.Context(), st); err != nil {
			http.Error(w, "not stored, send it again", http.StatusServiceUnavailable)
			return
		}
		say := c.OptOutSay
		if say == "" {
			say = DefaultOptOutSay
		}
		twiml(w, "<Say>"+escape(say)+"</Say><Hangup/>")
		return
	}
	next := q.Get("next")
	if kind, err := (provider.Scripts{}).Check(next); next == "" || len(next) > maxID || err != nil || kind != provider.ScriptName || c.ScriptURL == "" {
		twiml(w, "") // an empty Response ends the call
		return
	}
	twiml(w, `<Redirect method="POST">`+escape(ScriptURLFor(c.ScriptURL, next, callID, userID))+`</Redirect>`)
}

// twiml answers 200 with a TwiML Response of body.
func twiml(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/xml; charset=utf-8")
	_, _ = w.Write([]byte(xml.Header + "<Response>" + body + "</Response>\n"))
}

func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// ScriptURLFor is the TwiML URL of the script name of call callID of user
// userID: template (--twilio-script-url) with {script}, {call_id} and
// {user_id} replaced, each query-escaped.
func ScriptURLFor(template, name, callID, userID string) string {
	return strings.NewReplacer("{script}", url.QueryEscape(name), "{call_id}", url.QueryEscape(callID),
		"{user_id}", url.QueryEscape(userID)).Replace(template)
}
