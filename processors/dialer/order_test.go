package dialer

import (
	"context"
	"slices"
	"testing"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

// Twilio's status callbacks may arrive out of order: a status older than
// one recorded for the call (initiated after ringing, ringing after
// in-progress) is not published.
func TestOutOfOrderStatusesAreNotPublished(t *testing.T) {
	h := setup(t, &recorder{answer: provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED, ProviderCallID: "CA-c1"}}, 2)
	h.call("u1", "c1")
	h.idle()
	for _, s := range []provider.Status{
		status("u1", "c1", pb.Outcome_OUTCOME_RINGING, false),
		status("u1", "c1", pb.Outcome_OUTCOME_PLACED, false), // initiated, late
		status("u1", "c1", pb.Outcome_OUTCOME_ANSWERED, false),
		status("u1", "c1", pb.Outcome_OUTCOME_RINGING, false), // late
		status("u1", "c1", pb.Outcome_OUTCOME_PLACED, false),  // late
		status("u1", "c1", pb.Outcome_OUTCOME_MACHINE, false), // detection after the answer: new
		status("u1", "c1", pb.Outcome_OUTCOME_ANSWERED, true),
	} {
		if err := h.d.Publish(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, r := range h.allResults() {
		got = append(got, r.GetOutcome().String())
	}
	want := []string{"OUTCOME_PLACED", "OUTCOME_RINGING", "OUTCOME_ANSWERED", "OUTCOME_MACHINE", "OUTCOME_MACHINE"}
	if !slices.Equal(got, want) {
		t.Fatalf("published %v\nwant      %v", got, want)
	}
	if r := h.state("u1").GetCalls()[0]; r.GetOutcome() != pb.Outcome_OUTCOME_MACHINE || !r.GetFinal() {
		t.Fatalf("record %v", r)
	}
}
