package scheduler

import (
	"testing"
	"time"
)

// The punctuator sends an idle partition no tick until its next follow-up
// is due; a new policy version makes it tick the partition once, at its
// next round, for the tick to sweep the deferred follow-ups; once the mark
// records the version, no tick again until the next due time.
func TestIdlePartitionIsTickedOncePerPolicyVersion(t *testing.T) {
	la := zone(t, "America/Los_Angeles")
	start := time.Date(2026, 7, 14, 23, 0, 0, 0, la)
	h, p := newPolicyHarness(t, `
default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "08:00", to: "21:00"}]
`, start)
	h.onboardUser("la", "+14155550100", "", delay("welcome", time.Hour)) // 00:00 local: deferred to 08:00
	punct := h.s.Punctuator()
	if at, ok := punct.NextTick(0); !ok || at.After(h.clk.Now()) {
		t.Fatalf("next tick %v (%v), want the first after the open at once", at, ok)
	}
	h.tickTime(start.Add(time.Minute))
	if at, ok := punct.NextTick(0); !ok || !at.Equal(time.Date(2026, 7, 15, 8, 0, 0, 0, la)) {
		t.Fatalf("next tick %v (%v), want none before the deferred follow-up at 08:00", at.In(la), ok)
	}

	p.Store(mustPolicy(t, `
default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "06:00", to: "22:00"}]
`))
	if at, ok := punct.NextTick(0); !ok || at.After(h.clk.Now()) {
		t.Fatalf("next tick %v (%v) after the policy changed, want one at the next round", at.In(la), ok)
	}
	h.tickTime(start.Add(2 * time.Minute))
	six := time.Date(2026, 7, 15, 6, 0, 0, 0, la)
	if d := h.task("la", "welcome").GetDueAt().AsTime(); !d.Equal(six) {
		t.Fatalf("welcome due %v, want moved to 06:00", d.In(la))
	}
	if at, ok := punct.NextTick(0); !ok || !at.Equal(six) {
		t.Fatalf("next tick %v (%v) after the sweep, want none before 06:00", at.In(la), ok)
	}
}
