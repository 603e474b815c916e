package dueindex

import (
	"testing"
	"time"
)

func TestUpcomingPagesInFiringOrderWithoutTaking(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	x := NewIndex(nil)
	x.Update("b", nil, &Value{Pending: []Task{{Due: t0.Add(2 * time.Second).UnixNano(), ID: "t"}}})
	x.Update("a", nil, &Value{Pending: []Task{{Due: t0.Add(time.Second).UnixNano(), ID: "t"}, {Due: t0.Add(3 * time.Second).UnixNano(), ID: "u"}}})
	x.Update("c", nil, &Value{Pending: []Task{{Due: t0.Add(2 * time.Second).UnixNano(), ID: "t"}}})
	first := mustUpcoming(t, x, Pos{Due: t0.Add(2 * time.Second).UnixNano()}, 2)
	if len(first) != 2 || first[0].User != "b" || first[1].User != "c" {
		t.Fatalf("first page from t0+2s: %+v", first)
	}
	next := mustUpcoming(t, x, first[1], 2)
	if len(next) != 1 || next[0].User != "a" || next[0].Task != "u" {
		t.Fatalf("page after %+v: %+v", first[1], next)
	}
	if due := x.TakeDue(t0.Add(time.Hour), 0); len(due) != 4 {
		t.Fatalf("Upcoming took follow-ups: %d left of 4", len(due))
	}
}

// Aside lists the held follow-ups due before its bound, in order, without
// the retention timers, and counts the parked ones; Upcoming lists
// neither.
func TestAsideListsHeldAndCountsParked(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	x := NewIndex(nil)
	x.SetRetention(time.Minute)
	x.Update(markKey, nil, &Value{Mark: &Mark{Through: Pos{Due: t0.UnixNano(), User: "z", Task: "t"}}})
	x.Update("h2", nil, &Value{Pending: []Task{{Due: t0.Add(-time.Second).UnixNano(), ID: "x", Held: true}}, LastActive: t0.UnixNano()})
	x.Update("h1", nil, &Value{Pending: []Task{{Due: t0.Add(-2 * time.Second).UnixNano(), ID: "x", Held: true}}, LastActive: t0.UnixNano()})
	x.Update("late", nil, &Value{Pending: []Task{{Due: t0.Add(-time.Millisecond).UnixNano(), ID: "x", Held: true}}, LastActive: t0.UnixNano()})
	x.Update("idle", nil, &Value{LastActive: t0.Add(-time.Hour).UnixNano()}) // a retention timer, the earliest
	x.Update("p", nil, &Value{Pending: []Task{{Due: t0.Add(time.Second).UnixNano(), ID: "t"}}})
	x.Update("q", nil, &Value{Pending: []Task{{Due: t0.Add(time.Minute).UnixNano(), ID: "t"}}})
	due := x.TakeDue(t0.Add(time.Second), 0)
	if len(due) != 1 {
		t.Fatalf("due %v", due)
	}
	x.Park(due[0])
	held, parked := x.Aside(t0.Add(-time.Millisecond).UnixNano(), 10)
	if len(held) != 2 || held[0].User != "h1" || held[1].User != "h2" || parked != 1 {
		t.Fatalf("held %+v, parked %d; want h1 and h2 (late is at the bound), one parked", held, parked)
	}
	if held, _ := x.Aside(t0.UnixNano(), 1); len(held) != 1 || held[0].User != "h1" {
		t.Fatalf("at most one: %+v", held)
	}
	if up := mustUpcoming(t, x, Pos{}, 10); len(up) != 1 || up[0].User != "q" {
		t.Fatalf("Upcoming %+v, want q alone", up)
	}
}

// mustUpcoming is x.Upcoming, failing the test on an error.
func mustUpcoming(t *testing.T, x *Index, after Pos, max int) []Pos {
	t.Helper()
	ps, err := x.Upcoming(after, max)
	if err != nil {
		t.Fatalf("Upcoming(%v, %d): %v", after, max, err)
	}
	return ps
}
