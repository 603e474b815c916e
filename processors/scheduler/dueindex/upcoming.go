package dueindex

// Upcoming returns, in firing order, up to max pending follow-ups after
// the mark that come after the position after (Pos{Due: t}: those due at
// or after t), without taking them: what the admin API lists. It
// walks the B-tree from after, so it costs O(log n + max), not the table.
// Held follow-ups (timers) and parked ones are not listed: Aside. An
// error is the store's, read beyond the window: the list is not complete.
func (x *Index) Upcoming(after Pos, max int) ([]Pos, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []Pos
	x.probe = after
	pivot := item{due: after.Due, ref: probeRef}
	x.ready.AscendGreaterOrEqual(pivot, func(it item) bool {
		if it.ref == probeRef || !x.after(it, after) {
			return true
		}
		out = append(out, x.keys.pos(it))
		return len(out) < max
	})
	x.probe = Pos{}
	if x.src != nil && len(out) < max { // beyond the window
		from := after
		if from.Due < x.hReady {
			from = Pos{Due: x.hReady}
		}
		more, err := x.upcomingStore(from, max-len(out))
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
	}
	return out, nil
}

// Aside returns what Upcoming does not list: the held follow-ups due
// before before (timers a wake fires at their due times), in firing
// order, at most max, and how many follow-ups are parked (due, not fired:
// waiting for their users' callbacks to move them under the calling
// policy in force, to times not known yet). The walk stops once it found
// every held follow-up: with none held (nearly always) it costs nothing.
func (x *Index) Aside(before int64, max int) (held []Pos, parked int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.held > 0 && max > 0 {
		x.timers.Ascend(func(it item) bool {
			if it.due >= before {
				return false
			}
			if p := x.keys.pos(it); p.Task != RetentionTask {
				held = append(held, p)
			}
			return len(held) < min(max, x.held)
		})
	}
	return held, x.parked.Len()
}
