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
	forget := h.forgotten()
	if forget.GetForgetOffset() <= first.GetCreatedOffset() {
		t.Fatalf("forget_offset %d, want above the calls' %d", forget.GetForgetOffset(), first.GetCreatedOffset())
	}
	h.onboard("u1", at("d", t0.Add(3*time.Second)))
	h.tickAt(3 * time.Second)
	if again := h.expectCalls("d")[0]; again.GetCreatedOffset() <= forget.GetForgetOffset() {
		t.Fatalf("a call of the user onboarded again carries %d, want above the Forget's %d", again.GetCreatedOffset(), forget.GetForgetOffset())
	}
}

// The onboarding topic recreated (or truncated by an unclean election)
// starts its offsets again, below the places of the values created before.
// A call fired from such a value just before its user's Forget carries a
// place the Forget's own offset cannot order: with it, the dialer would
// take the call for one fired after the erase, place it and recreate the
// user's dialer value. The Forget then carries no place, and the dialer
// drops every call of the user while the Forget is recent.
func TestForgetOfAValueFromBeforeTheOffsetsRestarted(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", time.Second))
	st := h.state("u1")
	st.CreatedOffset = 1_000_000 // created before the topic was recreated
	h.tt.SetTableValue(h.topics.SchedulerTable(), "u1", st)
	h.tickAt(time.Second)
	call := h.expectCalls("a")[0]
	h.nextEvents()
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Forget{Forget: &pb.Forget{}}})
	forget := h.forgotten()
	if f := forget.GetForgetOffset(); f != 0 && f-1 < call.GetCreatedOffset() {
		t.Fatalf("forget_offset %d orders the call of created_offset %d after the Forget: the dialer would place it after the erase", f, call.GetCreatedOffset())
	}
}

// forgotten returns the KIND_FORGOTTEN event among the events since the
// last look.
func (h *harness) forgotten() *pb.ScheduleEvent {
	h.t.Helper()
	for _, e := range h.nextEvents() {
		if e.GetKind() == pb.ScheduleEvent_KIND_FORGOTTEN {
			return e
		}
	}
	h.t.Fatal("no KIND_FORGOTTEN event")
	return nil
}
