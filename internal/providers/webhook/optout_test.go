package webhook

import (
	"net/http"
	"testing"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

// The endpoint reports an opt-out as the outcome "opted_out": final even
// when the body says otherwise; a number in the body is not passed on
// (the dialer lists the number it called).
func TestCallbackOptOut(t *testing.T) {
	secret, now := []byte("s3cret"), time.Unix(1_800_000_000, 0)
	s := &sink{}
	cb := &Callback{Secret: secret, CallbackEndpoint: provider.CallbackEndpoint{Sink: s, Now: func() time.Time { return now }}}
	body := `{"call_id":"c-1","user_id":"u-1","outcome":"opted_out","final":false,"phone":"+14155550199","provider_call_id":"p-1"}`
	if code := post(t, cb, body, Sign(secret, now, []byte(body))); code != http.StatusNoContent {
		t.Fatalf("opt-out: %d", code)
	}
	if len(s.got) != 1 || s.got[0].Outcome != pb.Outcome_OUTCOME_OPTED_OUT || !s.got[0].Final || s.got[0].CallID != "c-1" || s.got[0].ProviderCallID != "p-1" {
		t.Fatalf("published %+v", s.got)
	}
}
