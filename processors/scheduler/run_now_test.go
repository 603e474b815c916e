package scheduler

import (
	"testing"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// RunNow fires a follow-up that the calling policy deferred to tomorrow
// morning at the next tick, with the call id it had; a run-now of a task
// that fired is too late, of a task never seen unknown.
func TestRunNowFiresADeferredFollowUpAtOnce(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	start := time.Date(2026, 7, 14, 22, 0, 0, 0, berlin)
	h, _ := newPolicyHarness(t, "default:\n  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: \"09:00\", to: \"17:00\"}]\n", start)
	h.onboardUser("u1", "+4915112345678", "Europe/Berlin", delay("t1", time.Minute))
	st := h.state("u1")
	if len(st.GetPending()) != 1 || st.GetPending()[0].GetDeferred() != "window" {
		t.Fatalf("not deferred: %v", st)
	}
	wantID := CallID("u1", st.GetPending()[0])
	h.nextEvents()

	h.clk.Set(start.Add(time.Second))
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_RunNow{RunNow: &pb.RunNow{TaskId: "t1"}}})
	if ev := h.nextEvents(); len(ev) != 1 || ev[0].GetKind() != pb.ScheduleEvent_KIND_RUN_NOW || !ev[0].GetDueAt().AsTime().Equal(start.Add(time.Second)) {
		t.Fatalf("events %v", ev)
	}
	h.tickTime(start.Add(2 * time.Second))
	c := h.expectCalls("t1")[0]
	if c.GetCallId() != wantID {
		t.Fatalf("call id %s, want the deferred follow-up's %s", c.GetCallId(), wantID)
	}

	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_RunNow{RunNow: &pb.RunNow{TaskId: "t1"}}})
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_RunNow{RunNow: &pb.RunNow{TaskId: "nope"}}})
	ev := h.nextEvents()
	if len(ev) != 2 || ev[0].GetKind() != pb.ScheduleEvent_KIND_TOO_LATE || ev[1].GetKind() != pb.ScheduleEvent_KIND_UNKNOWN_TASK {
		t.Fatalf("events %v", ev)
	}
	h.tickTime(start.Add(24 * time.Hour))
	h.expectCalls()
}
