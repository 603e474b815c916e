package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func stepsString(steps []Step, loc *time.Location) string {
	var b []string
	for _, s := range steps {
		x := fmt.Sprintf("%s %s->%s", s.Reason, s.From.In(loc).Format("01-02 15:04:05"), s.To.In(loc).Format("01-02 15:04:05"))
		if s.Blackout != "" {
			x += " " + s.Blackout
		}
		b = append(b, x)
	}
	return strings.Join(b, "; ")
}

// A call due at night moves by the open hours to the window's opening, by
// the spread past it, then by the cap past the user's other call: each
// move is one step, in order, and they chain from the due time to the
// effective time.
func TestEffectiveStepsWindowSpreadCap(t *testing.T) {
	p := mustParse(t, `default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "08:00", to: "21:00"}]
  spread: 10m
  cap: {calls: 1, per: 1h}
`)
	ber := zone(t, "Europe/Berlin")
	due := at(t, ber, "2027-03-10 22:30")
	other := at(t, ber, "2027-03-11 08:00")
	res := effective(t, p, Request{Due: due, Zones: []*time.Location{ber}, Region: "DE", CallID: "c-2",
		Recent: []Call{{ID: "c-1", At: other}}})
	if res.Reason != ReasonWindow {
		t.Fatalf("reason %v, want window", res.Reason)
	}
	got := stepsString(res.Steps, ber)
	if len(res.Steps) != 3 || res.Steps[0].Reason != ReasonWindow || res.Steps[1].Reason != ReasonSpread || res.Steps[2].Reason != ReasonCap {
		t.Fatalf("steps %s, want window, spread, cap", got)
	}
	if !res.Steps[0].From.Equal(due) || !res.Steps[0].To.Equal(at(t, ber, "2027-03-11 08:00")) {
		t.Errorf("window step %s", got)
	}
	for i := 1; i < len(res.Steps); i++ {
		if !res.Steps[i].From.Equal(res.Steps[i-1].To) {
			t.Errorf("steps do not chain: %s", got)
		}
	}
	if last := res.Steps[len(res.Steps)-1]; !last.To.Equal(res.At) || !last.To.Equal(other.Add(time.Hour)) {
		t.Errorf("last step %s, effective %v, want the cap's end %v", got, res.At.In(ber), other.Add(time.Hour).In(ber))
	}
}

// A blackout date names itself in its step; a pause is a step of its own;
// a call the policy does not move has no steps.
func TestEffectiveStepsBlackoutPauseNone(t *testing.T) {
	p := mustParse(t, `default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "08:00", to: "21:00"}]
  blackouts: [{name: holiday, from: 2027-03-11}]
campaigns:
  spring: {paused_until: "2027-03-10T15:00:00Z"}
`)
	ber := zone(t, "Europe/Berlin")
	res := effective(t, p, Request{Due: at(t, ber, "2027-03-10 22:30"), Zones: []*time.Location{ber}, Region: "DE"})
	if got := stepsString(res.Steps, ber); got != "blackout 03-10 22:30:00->03-12 08:00:00 holiday" {
		t.Errorf("steps %s, want one blackout step to the 12th", got)
	}
	res = effective(t, p, Request{Due: at(t, ber, "2027-03-10 12:00"), Zones: []*time.Location{ber}, Region: "DE", Campaign: "spring"})
	if got := stepsString(res.Steps, ber); res.Reason != ReasonPaused || got != "paused 03-10 12:00:00->03-10 16:00:00" {
		t.Errorf("reason %v, steps %s, want one pause step to its end", res.Reason, got)
	}
	res = effective(t, p, Request{Due: at(t, ber, "2027-03-10 12:00"), Zones: []*time.Location{ber}, Region: "DE"})
	if res.Steps != nil || res.Reason != ReasonNone {
		t.Errorf("a call inside the window: reason %v, steps %s", res.Reason, stepsString(res.Steps, ber))
	}
}
