package scheduler

import (
	"testing"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// A series ticked long after its due time (the scheduler was down for 3 h)
// calls once, and its next occurrence is the first one after that call
// (design.md: a series does not catch up). Before the fix the follow-up a
// tick fired was recorded without its fire time, the next occurrence
// counted from the due time, and every tick fired one more missed
// occurrence at once: 36 calls for the 3 h of an every-5m series.
func TestLateTickDoesNotCatchUpASeries(t *testing.T) {
	start := time.Date(2026, 6, 10, 9, 0, 0, 0, time.UTC)
	h, _ := newPolicyHarness(t, `{default: {open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "00:00", to: "24:00"}]}}`, start)
	f := delay("r", 5*time.Minute)
	f.Repeat = &pb.Repeat{Every: "5m"}
	h.onboardUser("u1", "+4915112345678", "", f)
	due := start.Add(5 * time.Minute)
	fired := due.Add(3*time.Hour + time.Minute)
	calls := 0
	for range 50 { // ticks as the punctuator sends them while anything is due
		h.tickTime(fired)
		calls += len(h.nextCalls())
	}
	if calls != 1 {
		t.Fatalf("%d calls after the outage, want 1", calls)
	}
	next := h.task("u1", "r")
	if want := due.Add(3*time.Hour + 5*time.Minute); !next.GetDueAt().AsTime().Equal(want) || !next.GetRequestedAt().AsTime().Equal(want) {
		t.Fatalf("next occurrence due %v, want %v: the first after the fire at %v", next.GetDueAt().AsTime(), want, fired)
	}
	st := h.state("u1")
	if n := len(st.GetFired()); n != 1 || !st.GetFired()[0].GetFiredAt().AsTime().Equal(fired) {
		t.Fatalf("fired history %v, want the one call with its fire time", st.GetFired())
	}
	h.tickTime(due.Add(3*time.Hour + 5*time.Minute))
	h.expectCalls("r")
}
