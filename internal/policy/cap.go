package policy

import (
	"slices"
	"sort"
	"time"
)

// Call is a call the user got or will get, for the frequency cap.
type Call struct {
	ID string    // the call's id; a call with the requested call's own id is ignored (a replay)
	At time.Time // when it was (or will be) placed
}

// capCalls is the calls that matter for a cap: the others than the call
// itself, sorted by time.
func capCalls(recent []Call, self string) []time.Time {
	out := make([]time.Time, 0, len(recent))
	for _, c := range recent {
		if c.ID != self || self == "" {
			out = append(out, c.At)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// capAllows tells whether a call at t keeps every period [s, s+per) that
// contains t at no more than calls calls, counting the others (sorted). The
// fullest such period starts at one of the calls in (t-per, t], t itself
// included: one pass over the calls within per of t.
func capAllows(t time.Time, c Cap, others []time.Time) bool {
	lo, hi := t.Add(-c.Per), t.Add(c.Per)
	i := sort.Search(len(others), func(i int) bool { return others[i].After(lo) })
	j := sort.Search(len(others), func(j int) bool { return !others[j].Before(hi) })
	near := others[i:j] // within per of t, sorted
	at := sort.Search(len(near), func(k int) bool { return near[k].After(t) })
	// The calls in order with t inserted after the others at the same
	// instant: positions 0..len(near), t at position at.
	get := func(k int) time.Time {
		switch {
		case k < at:
			return near[k]
		case k == at:
			return t
		}
		return near[k-1]
	}
	n := len(near) + 1
	end := 0
	for start := 0; start <= at; start++ {
		s := get(start)
		if end < start {
			end = start
		}
		for end < n && get(end).Before(s.Add(c.Per)) {
			end++
		}
		if end-start > c.Calls {
			return false
		}
	}
	return true
}

// capNext is the first instant after t at which a call is further than per
// from one of the others that is within per of t: where the cap can first
// allow a call that it does not allow at t.
func capNext(t time.Time, per time.Duration, others []time.Time) time.Time {
	var next time.Time
	for _, o := range others {
		leave := o.Add(per)
		if leave.After(t) && o.After(t.Add(-per)) && (next.IsZero() || leave.Before(next)) {
			next = leave
		}
	}
	return next
}
