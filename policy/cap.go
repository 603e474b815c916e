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
// contains t at no more than calls calls, counting the others. The fullest
// such period starts at one of the calls in (t-per, t], t itself included.
func capAllows(t time.Time, c Cap, others []time.Time) bool {
	lo := t.Add(-c.Per)
	hi := t.Add(c.Per)
	// The others within per of t, sorted; the periods to check start at t
	// or at one of those not after t.
	near := others[sort.Search(len(others), func(i int) bool { return others[i].After(lo) }):]
	count := func(start time.Time) int {
		n := 0
		if !t.Before(start) && t.Before(start.Add(c.Per)) {
			n++
		}
		for _, o := range near {
			if !o.Before(hi) {
				break
			}
			if !o.Before(start) && o.Before(start.Add(c.Per)) {
				n++
			}
		}
		return n
	}
	if count(t) > c.Calls {
		return false
	}
	for _, o := range near {
		if o.After(t) {
			break
		}
		if count(o) > c.Calls {
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
