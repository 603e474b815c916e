package scheduler

import (
	"testing"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// A user's value records the onboarding offset of the command that created
// it, and every call fired from it carries that offset; a Forget carries
// its own: a call fired before the Forget carries less, one fired from the
// value of a user onboarded again more, whatever the hosts' clocks.
func TestCallsAndForgetCarryTheOnboardingOrder(t *testing.T) {
	h := newHarness(t)
	h.onboard("u0", delay("a", time.Hour)) // the onboarding offsets start past 0
	h.onboard("u1", delay("a", time.Second))
	h.tickAt(time.Second)
	first := h.expectCalls("a")[0]
	if first.GetCreatedOffset() < 2 || h.state("u1").GetCreatedOffset() != first.GetCreatedOffset() {
		t.Fatalf("call carries created_offset %d, the value %d", first.GetCreatedOffset(), h.state("u1").GetCreatedOffset())
	}
	h.clk.Set(t0.Add(2 * time.Second))
	h.onboard("u1", at("c", t0)) // before the mark: fires in the command's callback
	if c := h.expectCalls("c")[0]; c.GetCreatedOffset() != first.GetCreatedOffset() {
		t.Fatalf("a call fired by a command carries %d, want the value's %d", c.GetCreatedOffset(), first.GetCreatedOffset())
	}
	h.nextEvents()
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Forget{Forget: &pb.Forget{}}})
	var forget *pb.ScheduleEvent
	for _, e := range h.nextEvents() {
		if e.GetKind() == pb.ScheduleEvent_KIND_FORGOTTEN {
			forget = e
		}
	}
	if forget.GetForgetOffset() <= first.GetCreatedOffset() {
		t.Fatalf("forget_offset %d, want above the calls' %d", forget.GetForgetOffset(), first.GetCreatedOffset())
	}
	h.onboard("u1", at("d", t0.Add(3*time.Second)))
	h.tickAt(3 * time.Second)
	if again := h.expectCalls("d")[0]; again.GetCreatedOffset() <= forget.GetForgetOffset() {
		t.Fatalf("a call of the user onboarded again carries %d, want above the Forget's %d", again.GetCreatedOffset(), forget.GetForgetOffset())
	}
}
