package dueindex

import (
	"slices"
	"time"
)

// Backlog is what a partition's due index holds at a moment, for metrics:
// read at scrape time, so firing pays nothing for it.
type Backlog struct {
	// Pending is the follow-ups waiting to fire: those after the mark,
	// parked ones included, and the held ones (kept as timers, Held).
	// With a store, those beyond the window are counted in the background
	// after an open (Index.CountBeyond): until then they are left out.
	Pending int
	// Held is how many of them are held follow-ups (the mark passed them
	// on another clock; a wake fires them).
	Held int
	// Due is the follow-ups after the mark due at the moment asked, not
	// fired yet (held ones not counted: their wakes are on their way).
	Due int
	// OldestDue is the due time of the earliest of them; zero if none is
	// due.
	OldestDue time.Time
}

// Backlog counts the pending follow-ups and those due at now. It walks the
// due ones (O(due) under the index's lock, which the partition's writes
// wait for), so it is for a scrape every few seconds, not for every fire.
func (x *Index) Backlog(now time.Time) Backlog {
	n := now.UnixNano()
	x.mu.Lock()
	defer x.mu.Unlock()
	b := Backlog{Pending: x.ready.Len() + x.parked.Len() + x.held, Held: x.held, Due: x.parked.Len()}
	if x.countDone { // with a store: those beyond the window
		b.Pending += max(x.counted+x.outside, 0)
	}
	oldest := int64(0)
	found := false
	if p, ok := x.parked.Min(); ok {
		oldest, found = p.Due, true
	}
	x.ready.Ascend(func(it item) bool {
		if it.due > n {
			return false
		}
		if b.Due == x.parked.Len() && (!found || it.due < oldest) {
			oldest, found = it.due, true
		}
		b.Due++
		return true
	})
	if found {
		b.OldestDue = time.Unix(0, oldest)
	}
	return b
}

// Backlogs returns the backlog of every partition whose due index this
// punctuator holds, by partition, at the punctuator's clock's now. It may
// be called from any goroutine.
func (p *Punctuator) Backlogs() (now time.Time, parts []int32, backlogs []Backlog) {
	p.mu.Lock()
	idx := make(map[int32]*Index, len(p.parts))
	for part, s := range p.parts {
		idx[part] = s.index
		parts = append(parts, part)
	}
	p.mu.Unlock()
	slices.Sort(parts)
	now = p.cfg.Clock.Now()
	for _, part := range parts {
		backlogs = append(backlogs, idx[part].Backlog(now))
	}
	return now, parts, backlogs
}
