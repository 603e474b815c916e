package twilio_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
	"github.com/ivrsched/ivrsched/internal/providers/twilio"
	"github.com/ivrsched/ivrsched/internal/providers/twilio/twiliotest"
)

type refusing struct{}

func (refusing) Publish(context.Context, provider.Status) error { return errors.New("kafka down") }

// A call's script reaches the opt-out Gather with the call's ids (its URL
// names them); Twilio's signed Gather result with the opt-out digit is
// published as the call's final OUTCOME_OPTED_OUT with its CallSid, and
// answered with TwiML that ends the call; another key continues with the
// script next names; a forged, an unreadable and an oversized request
// change nothing; a status not stored gets 503.
func TestGatherOptOut(t *testing.T) {
	fake := twiliotest.New(twiliotest.Options{AccountSID: sid, AuthToken: token})
	defer fake.Close()
	s := &sink{}
	cb := &twilio.Callback{AuthToken: token, OptOutDigit: "9", ScriptURL: "https://ivr.example/twiml/{script}?c={call_id}",
		CallbackEndpoint: provider.CallbackEndpoint{Sink: s}}
	mux := http.NewServeMux()
	mux.Handle(twilio.GatherPath, cb.Gather())
	srv := httptest.NewServer(mux)
	defer srv.Close()
	cb.PublicURL = srv.URL
	p := newProvider(t, fake.URL, srv.URL, func(c *twilio.Config) {
		c.ScriptURL = "https://ivr.example/twiml/{script}?call_id={call_id}&user_id={user_id}"
	})
	if _, err := p.Place(context.Background(), call("u 1", "c-1", "offer")); err != nil {
		t.Fatal(err)
	}
	c := fake.Calls()[0]
	if got := c.Form.Get("Url"); got != "https://ivr.example/twiml/offer?call_id=c-1&user_id=u+1" {
		t.Fatalf("script URL %s", got)
	}
	action := srv.URL + twilio.GatherPath + "?" + url.Values{"call_id": {"c-1"}, "user_id": {"u 1"}, "next": {"menu"}}.Encode()
	send := func(action, digits string, sign bool, want int) string {
		t.Helper()
		code, body, err := fake.SendGather(c, action, digits, sign)
		if err != nil || code != want {
			t.Fatalf("digits %q: %d %v %s, want %d", digits, code, err, body, want)
		}
		return body
	}
	// Another key: the call goes on with the script next names.
	if body := send(action, "1", true, http.StatusOK); !strings.Contains(body, `<Redirect method="POST">https://ivr.example/twiml/menu?c=c-1</Redirect>`) {
		t.Fatalf("TwiML after another key: %s", body)
	}
	send(action, "9", false, http.StatusForbidden)
	send(srv.URL+twilio.GatherPath+"?user_id=u", "9", true, http.StatusBadRequest)
	send(srv.URL+twilio.GatherPath+"?call_id="+strings.Repeat("c", 257)+"&user_id=u", "9", true, http.StatusBadRequest)
	if len(s.got) != 0 {
		t.Fatalf("published %+v before the opt-out", s.got)
	}
	body := send(action, "9", true, http.StatusOK)
	if !strings.Contains(body, "<Say>"+twilio.DefaultOptOutSay+"</Say><Hangup/>") {
		t.Fatalf("TwiML after the opt-out: %s", body)
	}
	if len(s.got) != 1 {
		t.Fatalf("published %+v", s.got)
	}
	if g := s.got[0]; g.Outcome != pb.Outcome_OUTCOME_OPTED_OUT || !g.Final || g.CallID != "c-1" || g.UserID != "u 1" || g.ProviderCallID != c.SID {
		t.Fatalf("published %+v", g)
	}
	if cb.Stats.Rejected.Load() != 1 || cb.Stats.Invalid.Load() != 2 || cb.Stats.Accepted.Load() != 1 {
		t.Fatalf("rejected %d invalid %d accepted %d", cb.Stats.Rejected.Load(), cb.Stats.Invalid.Load(), cb.Stats.Accepted.Load())
	}
	cb.Sink = refusing{}
	other := srv.URL + twilio.GatherPath + "?call_id=c-2&user_id=u"
	send(other, "9", true, http.StatusServiceUnavailable)
	// Without an opt-out digit, no key opts out.
	cb.OptOutDigit = ""
	if body := send(other, "9", true, http.StatusOK); strings.Contains(body, "Hangup") {
		t.Fatalf("TwiML without an opt-out digit: %s", body)
	}
}
