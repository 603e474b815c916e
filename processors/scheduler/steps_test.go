package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

func eventSteps(e *pb.ScheduleEvent, loc *time.Location) string {
	var s []string
	for _, st := range e.GetSteps() {
		s = append(s, fmt.Sprintf("%s %s->%s", st.GetRule(), st.GetFrom().AsTime().In(loc).Format("15:04"), st.GetTo().AsTime().In(loc).Format("15:04")))
	}
	return strings.Join(s, "; ")
}

// A deferral's report names each rule that moved the follow-up, in order,
// and the policy's version: two follow-ups due at night both go to the
// window's opening, and the cap moves the second an hour past the first.
func TestDeferralReportsEachRuleAndTheVersion(t *testing.T) {
	ber := zone(t, "Europe/Berlin")
	h, p := newPolicyHarness(t, `
default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "08:00", to: "21:00"}]
  cap: {calls: 1, per: 1h}
`, time.Date(2026, 7, 14, 22, 0, 0, 0, ber))
	h.onboardUser("u1", "+4915112345678", "Europe/Berlin", delay("first", 30*time.Minute), delay("second", 45*time.Minute))
	ev := h.deferredEvents()
	if len(ev) != 2 {
		t.Fatalf("%d deferrals, want 2: %v", len(ev), ev)
	}
	want := map[string]string{"first": "window 22:30->08:00", "second": "window 22:45->08:00; cap 08:00->09:00"}
	for _, e := range ev {
		if got := eventSteps(e, ber); got != want[e.GetTaskId()] {
			t.Errorf("%s: steps %q, want %q", e.GetTaskId(), got, want[e.GetTaskId()])
		}
		if e.GetPolicyVersion() == "" || e.GetPolicyVersion() != p.Load().Version() {
			t.Errorf("%s: policy version %q, want %q", e.GetTaskId(), e.GetPolicyVersion(), p.Load().Version())
		}
		if last := e.GetSteps()[len(e.GetSteps())-1]; !last.GetTo().AsTime().Equal(e.GetDueAt().AsTime()) {
			t.Errorf("%s: the last step ends at %v, the effective time is %v", e.GetTaskId(), last.GetTo().AsTime(), e.GetDueAt().AsTime())
		}
	}
}
