package dueindex

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/google/btree"
)

// Pos is a follow-up's place in firing order: due time, then user, then
// task. The zero Pos is before every follow-up.
type Pos struct {
	Due  int64 // unix nanoseconds
	User string
	Task string
}

// Less orders positions by due time, then user, then task.
func (a Pos) Less(b Pos) bool {
	if a.Due != b.Due {
		return a.Due < b.Due
	}
	if a.User != b.User {
		return a.User < b.User
	}
	return a.Task < b.Task
}

// Compare orders positions like Less, for the slices package.
func Compare(a, b Pos) int {
	switch {
	case a.Less(b):
		return -1
	case b.Less(a):
		return 1
	}
	return 0
}

// IsZero reports the zero position.
func (a Pos) IsZero() bool { return a == Pos{} }

// Time is the position's due time.
func (a Pos) Time() time.Time { return time.Unix(0, a.Due) }

// Mark is a partition's fired mark: every follow-up at or before Through has
// fired. The tick callback writes it to the table under the partition's tick
// key; the index reads it back like any other value.
type Mark struct {
	Through Pos
	// Staged is Through as it was at StagedAt; it becomes Checkpoint when a
	// newer one is staged, so Checkpoint is Through of one to two staging
	// intervals ago.
	Staged     Pos
	StagedAt   int64
	Checkpoint Pos
	// LastTick is the highest tick offset that moved the mark.
	LastTick int64
	// Swept is the version of the calling policy whose sweep of the
	// deferred follow-ups (SweepDeferred) finished.
	Swept string
}

// Task is a follow-up as the index sees it.
type Task struct {
	Due int64
	ID  string
	// Held: scheduled at or before the mark while not yet due by the
	// scheduling host's clock. The mark does not cover it; it is a timer.
	Held bool
	// Deferred: the calling policy moved it after its requested time.
	Deferred bool
}

// Value is what the index reads from one table value.
type Value struct {
	Pending []Task // not yet recorded as fired (those at or before the mark have fired, held ones excepted)
	Fired   []Task // recorded as fired
	Mark    *Mark  // set on a tick key's value
	// LastActive is the latest of the value's due times and of its last
	// update (unix nanoseconds): retention counts from it.
	LastActive int64
}

// RetentionTask is the task id of a user's retention timer (no follow-up
// has an empty task id).
const RetentionTask = ""

// Index is the due index of one partition of the scheduler table: every
// pending follow-up after the partition's fired mark, in firing order. It
// mirrors the table (the storage wrapper feeds it every Set and Delete,
// recovery included) and answers "what is due now" at a cost proportional to
// the answer.
//
// The follow-ups after the mark are items of a B-tree that hold no
// pointers: their ids are kept in slabs of bytes (see keys), so an index of
// millions costs the garbage collector nothing to trace.
//
// From Open until the first tick after it (Replayed), the index also keeps
// the follow-ups between the mark's Checkpoint and Through, the ones a
// replayed tick may have to publish again.
//
// Beside the follow-ups after the mark, the index holds timers that the
// mark does not cover, in a second B-tree of the same items: held
// follow-ups (Task.Held), and with a retention set, one retention timer per
// user with nothing pending, at LastActive + retention (task id
// RetentionTask). The tick takes those that are due (TakeTimers) and wakes
// their users' callbacks, which decide.
//
// The index also keeps the deferred follow-ups after the mark (the calling
// policy moved them after their requested times) in a set of their own, so
// that after a policy change the tick can look at each of them once
// (SweepDeferred) at a cost proportional to them, not to the table.
//
// A due follow-up the tick may not fire yet (the calling policy changed
// since it was scheduled, and it must now wait) is parked (Park): taken
// from the index but not fired, until its user's callback rewrites it.
// While any follow-up is parked, TakeDue and Next stop before the first
// parked one, so the mark, which the tick moves to the last follow-up it
// fired, never passes a parked one. Parking is in memory only: a
// partition opened again finds the follow-up pending, and the tick parks
// it again.
//
// Index is safe for concurrent use: the partition goroutine writes it, the
// punctuator reads it.
type Index struct {
	mu       sync.Mutex
	mark     Mark
	keys     keys
	probe    Pos                 // what an item with probeRef stands for, while remove looks it up
	ready    *btree.BTreeG[item] // pending follow-ups after the mark
	timers   *btree.BTreeG[item] // held follow-ups and retention timers, whatever the mark
	recent   *btree.BTreeG[Pos]  // fired, in (Checkpoint, Through]; nil once replay is settled
	parked   *btree.BTreeG[Pos]  // taken by a tick, not fired: waiting for their users' callbacks
	parkedBy map[string][]Pos    // the parked follow-ups of each user
	deferred *btree.BTreeG[item] // deferred follow-ups after the mark
	sweep    sweep               // the sweep of deferred under way
	keyCount int                 // table keys with a readable value
	held     int                 // held follow-ups among the timers (not retention timers)
	// woken: timers a tick took, by user, until the user's value is
	// written (the wake's callback writes it): Reopen puts them back.
	woken map[string][]Pos
	// recentGap: the index was kept across a close (Reopen), so recent
	// lacks the fired follow-ups of before: a replay scans the store.
	recentGap bool
	changed   func() // told when the earliest due time may have moved earlier
	retain    int64  // retention in nanoseconds; 0: no retention timers

	// The window of a store's due order (disk.go); without a store
	// (src nil) the window is everything: hReady and rAct are
	// math.MaxInt64. ready holds the pending follow-ups after the mark due
	// before hReady, timers the retention timers of users last active
	// before rAct (and every held follow-up). nextReady and nextRet are
	// lower bounds of the due times beyond the window (math.MaxInt64: none).
	src               Store
	hReady, nextReady int64
	rAct, nextRet     int64
	// The pending follow-ups beyond the window, for Backlog: counted by
	// CountBeyond (countDone once it has), plus outside, what Update and
	// fill added and took since it began.
	counted, outside int
	countDone        bool
}

func posLess(a, b Pos) bool { return a.Less(b) }

// NewIndex returns an empty index that keeps replay candidates until
// Replayed. changed, if not nil, is called (without the index lock held)
// when an update makes a follow-up due earlier than any before.
func NewIndex(changed func()) *Index {
	x := &Index{recent: btree.NewG(32, posLess), parked: btree.NewG(8, posLess), parkedBy: make(map[string][]Pos), changed: changed,
		hReady: math.MaxInt64, nextReady: math.MaxInt64, rAct: math.MaxInt64, nextRet: math.MaxInt64}
	x.ready = btree.NewG(32, x.itemLess)
	x.deferred = btree.NewG(32, x.itemLess)
	x.timers = btree.NewG(32, x.itemLess)
	return x
}

// SetRetention makes the index keep a retention timer for every user with
// nothing pending, due retain after the user's LastActive (0: none). Call
// it before the first Update.
func (x *Index) SetRetention(retain time.Duration) {
	x.mu.Lock()
	x.retain = int64(retain)
	x.mu.Unlock()
}

// itemLess orders items like their positions. Called with x.mu held.
func (x *Index) itemLess(a, b item) bool {
	if a.due != b.due { // most comparisons end here, before the ids are looked up
		return a.due < b.due
	}
	return x.view(a).Less(x.view(b))
}

// view is the position of it, with ids that are views of the keys (or the
// probe's): valid until it is freed.
func (x *Index) view(it item) Pos {
	if it.ref == probeRef {
		return x.probe
	}
	u, t := x.keys.ids(it)
	return Pos{Due: it.due, User: u, Task: t}
}

// after reports whether it comes after p in firing order.
func (x *Index) after(it item, p Pos) bool { return p.Less(x.view(it)) }

// remove drops the entry at p from tree, if it has it.
func (x *Index) remove(tree *btree.BTreeG[item], p Pos) {
	x.probe = p
	if it, ok := tree.Delete(item{due: p.Due, ref: probeRef}); ok {
		x.keys.free(it)
		x.countHeld(tree, p, -1)
	}
	x.probe = Pos{}
}

// countHeld keeps x.held: d is +1 when an entry at p went into tree, -1
// when one left it.
func (x *Index) countHeld(tree *btree.BTreeG[item], p Pos, d int) {
	if tree == x.timers && p.Task != RetentionTask {
		x.held += d
	}
}

// add inserts an entry at p into tree and reports whether it is now the
// tree's earliest.
func (x *Index) add(tree *btree.BTreeG[item], p Pos) bool {
	it := x.keys.put(p.Due, p.User, p.Task)
	if old, ok := tree.ReplaceOrInsert(it); ok {
		x.keys.free(old)
	} else {
		x.countHeld(tree, p, 1)
	}
	min, _ := tree.Min()
	return min == it
}

// takeMin removes tree's earliest entry and returns its position.
func (x *Index) takeMin(tree *btree.BTreeG[item]) Pos {
	it, _ := tree.DeleteMin()
	p := x.keys.pos(it)
	x.keys.free(it)
	x.countHeld(tree, p, -1)
	return p
}

// retention is the position of key's retention timer for value v.
func (x *Index) retention(key string, v *Value) Pos {
	return Pos{Due: v.LastActive + x.retain, User: key, Task: RetentionTask}
}

// Update records that the table value of key changed from old to v (nil:
// no value). Passing the old value instead of keeping a user → follow-ups
// map halves the index's memory; the storage wrapper has it at hand.
func (x *Index) Update(key string, old, v *Value) {
	x.mu.Lock()
	switch {
	case old == nil && v != nil:
		x.keyCount++
	case old != nil && v == nil:
		x.keyCount--
	}
	// Any write of the user's value settles its parked follow-ups and the
	// timers woken: the value now says where they are.
	notify := x.unpark(key)
	if len(x.woken) > 0 {
		delete(x.woken, key)
	}
	if old != nil {
		for _, t := range old.Pending {
			if t.Held {
				x.remove(x.timers, Pos{t.Due, key, t.ID})
			} else {
				if p := (Pos{t.Due, key, t.ID}); p.Due >= x.hReady && x.mark.Through.Less(p) {
					x.outside-- // beyond the window
				}
				x.remove(x.ready, Pos{t.Due, key, t.ID})
				if t.Deferred {
					x.remove(x.deferred, Pos{t.Due, key, t.ID})
				}
			}
		}
		if x.retain > 0 && old.Mark == nil {
			x.remove(x.timers, x.retention(key, old))
		}
		if x.recent != nil { // replay candidates are what the values hold now
			for _, ts := range [][]Task{old.Pending, old.Fired} {
				for _, t := range ts {
					x.recent.Delete(Pos{t.Due, key, t.ID})
				}
			}
		}
	}
	if v != nil && v.Mark != nil {
		x.setMark(*v.Mark)
	}
	if v != nil {
		active := false
		for _, t := range v.Pending {
			p := Pos{t.Due, key, t.ID}
			switch {
			case t.Held:
				active = true
				notify = x.add(x.timers, p) || notify
			case !x.mark.Through.Less(p):
				x.keepRecent(p) // fired by a tick, not yet recorded in the user's value
			default:
				active = true
				if in, earlier := x.readyInWindow(p); in {
					notify = x.add(x.ready, p) || notify
				} else {
					x.outside++
					notify = earlier || notify
				}
				if t.Deferred && x.src == nil { // with a store, swept from it
					x.add(x.deferred, p)
				}
			}
		}
		if !active && x.retain > 0 && v.Mark == nil {
			notify = x.addRetention(key, v.LastActive) || notify
		}
		if x.recent != nil {
			for _, t := range v.Fired {
				x.keepRecent(Pos{t.Due, key, t.ID})
			}
		}
	}
	x.mu.Unlock()
	if notify && x.changed != nil {
		x.changed()
	}
}

// AddRetention sets user's retention timer, at lastActive plus the
// retention: the tick calls it when it fires a user's last pending
// follow-up, which does not write the user's value.
func (x *Index) AddRetention(user string, lastActive int64) {
	x.mu.Lock()
	notify := x.retain > 0 && x.addRetention(user, lastActive)
	x.mu.Unlock()
	if notify && x.changed != nil {
		x.changed()
	}
}

// addRetention sets user's retention timer if it is in the window and
// reports whether it is now the earliest (or lowered the bound of those
// beyond the window). Called with x.mu held.
func (x *Index) addRetention(user string, lastActive int64) bool {
	in, earlier := x.retentionInWindow(lastActive)
	if !in {
		return earlier
	}
	return x.add(x.timers, x.retention(user, &Value{LastActive: lastActive}))
}

// unpark drops the parked follow-ups of key and reports whether that
// unblocked the index. Called with x.mu held.
func (x *Index) unpark(key string) bool {
	if len(x.parkedBy) == 0 { // nearly always: nothing is parked
		return false
	}
	ps, ok := x.parkedBy[key]
	if !ok {
		return false
	}
	delete(x.parkedBy, key)
	for _, p := range ps {
		x.parked.Delete(p)
	}
	return x.parked.Len() == 0
}

// Park records that the tick took the due follow-up at p and did not fire
// it: it waits for its user's callback to write the user's value. Until
// then TakeDue and Next stop before it.
func (x *Index) Park(p Pos) {
	x.mu.Lock()
	if _, dup := x.parked.ReplaceOrInsert(p); !dup {
		x.parkedBy[p.User] = append(x.parkedBy[p.User], p)
	}
	x.mu.Unlock()
}

// PutBack returns a follow-up the tick took but did not fire (it comes
// after a parked one) to the index.
func (x *Index) PutBack(p Pos) {
	x.mu.Lock()
	x.add(x.ready, p)
	x.mu.Unlock()
}

// Parked returns a copy of the parked follow-ups, in order, for tests and
// tools.
func (x *Index) Parked() []Pos {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]Pos, 0, x.parked.Len())
	x.parked.Ascend(func(p Pos) bool {
		out = append(out, p)
		return true
	})
	return out
}

// setMark moves the mark; follow-ups it passes have fired.
func (x *Index) setMark(m Mark) {
	old := x.mark
	x.mark = m
	if old.Through.Less(m.Through) {
		for {
			it, ok := x.ready.Min()
			if !ok || x.after(it, m.Through) {
				break
			}
			x.keepRecent(x.takeMin(x.ready))
		}
		for {
			it, ok := x.deferred.Min()
			if !ok || x.after(it, m.Through) {
				break
			}
			x.takeMin(x.deferred)
		}
	}
	if x.recent != nil {
		for {
			p, ok := x.recent.Min()
			if !ok || m.Checkpoint.Less(p) {
				break
			}
			x.recent.DeleteMin()
		}
	}
}

func (x *Index) keepRecent(p Pos) {
	if x.recent != nil && x.mark.Checkpoint.Less(p) && !x.mark.Through.Less(p) {
		x.recent.ReplaceOrInsert(p)
	}
}

// TakeDue removes and returns, in firing order, up to max follow-ups due at
// now (max <= 0: no limit), none after a parked one. The caller fires them
// (or parks them, and puts back the ones after a parked one) and then
// writes a mark at the last one it fired.
func (x *Index) TakeDue(now time.Time, max int) []Pos {
	x.mu.Lock()
	defer x.mu.Unlock()
	first, blocked := x.parked.Min()
	if !blocked {
		return x.take(x.ready, now, max)
	}
	var out []Pos
	for max <= 0 || len(out) < max {
		it, ok := x.ready.Min()
		if !ok || it.due > now.UnixNano() || x.after(it, first) {
			break
		}
		out = append(out, x.takeMin(x.ready))
	}
	return out
}

// TakeTimers removes and returns, in order, up to max timers (held
// follow-ups and retention timers) due at now. The caller wakes their
// users' callbacks, whose writes put back what is still to come.
func (x *Index) TakeTimers(now time.Time, max int) []Pos {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := x.take(x.timers, now, max)
	if len(out) > 0 && x.woken == nil {
		x.woken = make(map[string][]Pos)
	}
	for _, p := range out {
		x.woken[p.User] = append(x.woken[p.User], p)
	}
	return out
}

func (x *Index) take(tree *btree.BTreeG[item], now time.Time, max int) []Pos {
	n := now.UnixNano()
	var out []Pos
	for max <= 0 || len(out) < max {
		it, ok := tree.Min()
		if !ok || it.due > n {
			break
		}
		out = append(out, x.takeMin(tree))
	}
	return out
}

// Mark returns the partition's fired mark.
func (x *Index) Mark() Mark {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.mark
}

// Fired reports whether the follow-up at p has fired (it is at or before
// the mark).
func (x *Index) Fired(p Pos) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return !x.mark.Through.Less(p)
}

// Replaying reports whether the index still keeps replay candidates (no
// tick was handled since Open).
func (x *Index) Replaying() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.recent != nil
}

// Replayed ends the replay window and returns the fired follow-ups after
// from (at most Through) that the index kept. scanTo is zero when those are
// all of them; otherwise the caller must find the ones in (from, scanTo] in
// the table: scanTo is the Checkpoint when from is before it (the index
// keeps only those after it), or Through when the index was kept across a
// close (Reopen) and kept none.
func (x *Index) Replayed(from Pos) (fired []Pos, scanTo Pos) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.recent == nil {
		return nil, Pos{}
	}
	defer func() { x.recent, x.recentGap = nil, false }()
	if x.recentGap {
		if from.Less(x.mark.Through) {
			return nil, x.mark.Through
		}
		return nil, Pos{}
	}
	x.recent.Ascend(func(p Pos) bool {
		if from.Less(p) {
			fired = append(fired, p)
		}
		return true
	})
	if from.Less(x.mark.Checkpoint) {
		return fired, x.mark.Checkpoint
	}
	return fired, Pos{}
}

// Reopen readies an index kept across its partition's close for the
// partition's next open, as if built from the same store: the parked
// follow-ups back among the pending ones (the ticks park again what must
// wait), no sweep under way, and a replay window again (until the next
// Replayed), whose fired follow-ups are found in the store (Replayed's
// scanTo), and the timers ticks took whose users' callbacks have not
// written since back among the timers (their wakes may be lost with the
// session; a wake that arrives anyway finds nothing to do).
func (x *Index) Reopen(st Store) {
	x.mu.Lock()
	if x.src != nil {
		x.src = st // the same store, opened again at the same offset
	}
	for _, ps := range x.woken {
		for _, p := range ps {
			x.add(x.timers, p)
		}
	}
	x.woken = nil
	x.parked.Ascend(func(p Pos) bool {
		if x.mark.Through.Less(p) {
			x.add(x.ready, p)
		}
		return true
	})
	x.parked.Clear(false)
	x.parkedBy = make(map[string][]Pos)
	x.sweep = sweep{}
	x.recent = btree.NewG(32, posLess)
	x.recentGap = true
	x.mu.Unlock()
}

// Keys is the number of table keys the index has read a value of.
func (x *Index) Keys() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.keyCount
}

// Next returns the earliest due time of the follow-ups after the mark
// (none after a parked one) and the timers.
func (x *Index) Next() (time.Time, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	it, rok := x.ready.Min()
	at, ok := it.due, rok
	if !rok && x.nextReady != math.MaxInt64 { // the window is empty: its end, or the next beyond it
		at, ok = x.nextReady, true
	}
	if first, blocked := x.parked.Min(); ok && blocked && (!rok || x.after(it, first)) {
		ok = false // until the parked follow-ups are settled (Update notifies)
	}
	if t, tok := x.timers.Min(); tok && (!ok || t.due < at) {
		at, ok = t.due, true
	}
	if x.nextRet != math.MaxInt64 && (!ok || x.nextRet < at) {
		at, ok = x.nextRet, true
	}
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(0, at), true
}

// Len is the number of follow-ups after the mark in memory: with a
// store, those in the window.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ready.Len()
}

// Pending returns a copy of the follow-ups after the mark, in firing order,
// for tests: with a store, the window's and then the store's beyond it (a
// read of all of them; one that fails panics, failing the test).
func (x *Index) Pending() []Pos {
	out := x.all(x.ready)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.src != nil {
		more, err := x.upcomingStore(Pos{Due: x.hReady}, math.MaxInt)
		if err != nil {
			panic(fmt.Sprintf("dueindex: Pending: %v", err))
		}
		out = append(out, more...)
	}
	return out
}

// Timers returns a copy of the timers, in order, for tests and tools.
func (x *Index) Timers() []Pos { return x.all(x.timers) }

func (x *Index) all(tree *btree.BTreeG[item]) []Pos {
	x.mu.Lock()
	defer x.mu.Unlock()
	out := make([]Pos, 0, tree.Len())
	tree.Ascend(func(it item) bool {
		out = append(out, x.keys.pos(it))
		return true
	})
	return out
}

// sweep is where a sweep of the deferred follow-ups stands.
type sweep struct {
	version  string // the policy version it is for
	after    Pos    // the last position handed out
	afterSub []byte // with a store: the last entry read
	active   bool
}

// SweepDeferred hands out, in order, up to max deferred follow-ups for a
// sweep under the calling policy of the given version: the first call for
// a version the mark does not record as swept starts a sweep from the
// first deferred follow-up, the next calls go on after the last one handed
// out. done reports that the sweep handed out its last one (or that there
// was nothing to sweep): the caller then records the version in the mark
// (Mark.Swept). A version the mark records as swept hands out nothing.
// Deferred follow-ups added during a sweep were placed under the version
// swept for, or come after the last one handed out.
//
// With a store, the deferred follow-ups are read from it (in its order,
// not firing order), and an error reading it is returned.
func (x *Index) SweepDeferred(version string, max int) (ps []Pos, done bool, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if version == x.mark.Swept {
		x.sweep = sweep{}
		return nil, false, nil
	}
	if x.sweep.version != version || !x.sweep.active {
		x.sweep = sweep{version: version, active: true}
	}
	if x.src != nil {
		if ps, err = x.sweepStore(max); err != nil {
			return nil, false, fmt.Errorf("sweep the deferred follow-ups: %w", err)
		}
		if max <= 0 || len(ps) < max {
			x.sweep = sweep{}
			return ps, true, nil
		}
		return ps, false, nil
	}
	from := x.sweep.after
	x.probe = from
	x.deferred.AscendGreaterOrEqual(item{due: from.Due, ref: probeRef}, func(it item) bool {
		if it.ref == probeRef || !x.after(it, from) {
			return true
		}
		ps = append(ps, x.keys.pos(it))
		return max <= 0 || len(ps) < max
	})
	x.probe = Pos{}
	if len(ps) > 0 {
		x.sweep.after = ps[len(ps)-1]
	}
	if max <= 0 || len(ps) < max {
		x.sweep = sweep{}
		return ps, true, nil
	}
	return ps, false, nil
}

// Sweeping reports whether a sweep of deferred follow-ups is under way (the
// punctuator then ticks the partition as often as its gap allows).
func (x *Index) Sweeping() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.sweep.active
}

// Deferred returns a copy of the deferred follow-ups after the mark, in
// order, for tests (with a store, read from it; a read that fails panics,
// failing the test).
func (x *Index) Deferred() []Pos {
	x.mu.Lock()
	src := x.src
	x.mu.Unlock()
	if src == nil {
		return x.all(x.deferred)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []Pos
	err := readEntries(x.src, bound(kindDeferred, math.MinInt64), kindEnd(kindDeferred), func(_ []byte, due int64, key, task string, _ []byte) bool {
		if x.mark.Through.Less(Pos{due, key, task}) {
			out = append(out, Pos{due, key, task})
		}
		return true
	})
	if err != nil {
		panic(fmt.Sprintf("dueindex: Deferred: %v", err))
	}
	slices.SortFunc(out, Compare)
	return out
}
