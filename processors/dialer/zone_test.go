package dialer

import (
	"context"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

// The recipient's zone is recorded with the call's first status and
// published with each of its results, a callback's too: the user's own
// zone, else the number's single zone; none for a number spanning zones.
func TestResultsCarryTheRecipientsZone(t *testing.T) {
	h := setup(t, &recorder{answer: provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED, ProviderCallID: "CA"}}, 2)
	for _, c := range []*pb.IVRCall{
		{CallId: "own", UserId: "u1", TaskId: "t", Phone: "+14155550123", TimeZone: "Asia/Tokyo", Attempt: 1},
		{CallId: "number", UserId: "u2", TaskId: "t", Phone: "+4930123456", Attempt: 1},
		{CallId: "toll-free", UserId: "u3", TaskId: "t", Phone: "+18005550199", Attempt: 1},
	} {
		c.DueAt, c.FiredAt = timestamppb.Now(), timestamppb.Now()
		h.tt.Consume(string(h.topics.Calls), c.GetUserId(), c)
	}
	h.idle()
	for _, u := range []string{"u1", "u2", "u3"} {
		id := map[string]string{"u1": "own", "u2": "number", "u3": "toll-free"}[u]
		if err := h.d.Publish(context.Background(), status(u, id, pb.Outcome_OUTCOME_NO_ANSWER, true)); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]string{"own": "Asia/Tokyo", "number": "Europe/Berlin", "toll-free": ""}
	n := 0
	for _, r := range h.allResults() {
		n++
		if got := r.GetRecipientZone(); got != want[r.GetCallId()] {
			t.Errorf("result %s (%v): zone %q, want %q", r.GetCallId(), r.GetOutcome(), got, want[r.GetCallId()])
		}
	}
	if n != 6 {
		t.Fatalf("%d results, want a placement's and a final one of each call", n)
	}
	if z := h.state("u2").GetCalls()[0].GetRecipientZone(); z != "Europe/Berlin" {
		t.Fatalf("record's zone %q", z)
	}
}
