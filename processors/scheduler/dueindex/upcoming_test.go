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
	first := x.Upcoming(Pos{Due: t0.Add(2 * time.Second).UnixNano()}, 2)
	if len(first) != 2 || first[0].User != "b" || first[1].User != "c" {
		t.Fatalf("first page from t0+2s: %+v", first)
	}
	next := x.Upcoming(first[1], 2)
	if len(next) != 1 || next[0].User != "a" || next[0].Task != "u" {
		t.Fatalf("page after %+v: %+v", first[1], next)
	}
	if due := x.TakeDue(t0.Add(time.Hour), 0); len(due) != 4 {
		t.Fatalf("Upcoming took follow-ups: %d left of 4", len(due))
	}
}
