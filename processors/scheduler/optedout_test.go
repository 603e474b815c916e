package scheduler

import (
	"testing"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// A call whose recipient opted out ends its follow-up: the dialer's
// CallEnded with OUTCOME_OPTED_OUT is accepted (not dead-lettered), the
// follow-up is reported answered ("opted-out") and not retried, although
// the policy retries.
func TestOptedOutEndsTheFollowUp(t *testing.T) {
	h, _ := newPolicyHarness(t, retryPolicy, t0)
	h.onboard("u1", delay("a", time.Minute))
	h.tickAt(time.Minute)
	c := h.expectCalls("a")[0]
	h.ended(c, pb.Outcome_OUTCOME_OPTED_OUT)
	h.expectKinds("ANSWERED(opted-out)")
	if dls := h.deadLetters(); len(dls) != 0 {
		t.Fatalf("dead letters %v", dls)
	}
	if st := h.state("u1"); len(st.GetPending()) != 0 {
		t.Fatalf("pending after an opt-out: %v", st.GetPending())
	}
	h.tickAt(time.Hour)
	h.expectCalls()
}
