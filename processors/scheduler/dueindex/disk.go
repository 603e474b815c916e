package dueindex

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// The due order on disk. A table store that keeps a secondary index
// (internal/localstore's Stores.Index with Entries) holds, beside each
// user's value and in the same LevelDB batch, one entry per follow-up:
//
//   - 'd' due user task: a pending follow-up not held (meta 0) or a fired
//     one the value records (meta firedMeta);
//   - 'h' due user task: a held follow-up;
//   - 'f' due user task: a deferred follow-up, also under 'd';
//   - 'r' lastActive user: the user's retention, unless it holds a held
//     follow-up (its wake writes the value). A user whose follow-ups are
//     pending but all fired by the mark is idle: their due times are at or
//     before lastActive, so at its retention they are all due, and the
//     wake's callback (which decides) finds them fired.
//
// The due time is big-endian with its sign bit flipped, so entries sort by
// due time (then by the bytes of user and task, which is not the order of
// Pos: readers that need Pos order sort what they read).
//
// Then the Index keeps in memory only a window: the pending follow-ups
// after the mark due before hReady, the held ones (few), the retention
// timers of users last active before rAct, and the parked ones. Fill moves
// the window's ends ahead of the clock, reading the entries between the old
// and new ends; the deferred follow-ups are swept from the store, and the
// replay candidates and the slow path of a replay (FiredBetween) are read
// from it too. A store that survives a kill -9 holds its entries, so a
// partition opens with reads proportional to the window, not a scan.

// EntriesVersion names the layout Entries writes: a store written with
// another rebuilds its index once, at open.
const EntriesVersion = "due/1"

const (
	kindDue       = 'd'
	kindHeld      = 'h'
	kindDeferred  = 'f'
	kindRetention = 'r'

	firedMeta = 1
)

// Window sizes: Fill keeps the window at least fillAhead/2 ahead of the
// clock, reading up to fillAhead ahead, at most fillBatch entries of a kind
// a call (more on the next tick: a tick takes at most a few thousand).
// Variables for tests.
var (
	fillAhead = int64(10 * time.Second)
	fillBatch = 20000
)

// Store is a table store that keeps the entries of Entries (localstore's
// store with Stores.Index(EntriesVersion, Entries(parse))).
type Store interface {
	// IndexVersion is the version of the entries the store keeps ("":
	// none).
	IndexVersion() string
	// IndexRange calls fn in sub order with the entries whose sub is in
	// [from, to) as the table is now, until fn returns false.
	IndexRange(from, to []byte, fn func(sub []byte, key string, meta []byte) bool) error
}

// Entries returns the Indexer a table store keeps the due order with:
// the entries of one table value, as the package comment lists them. A
// value that does not parse, and a mark's value, have none.
func Entries(parse func(value []byte) (*Value, error)) func(key string, value []byte, put func(sub, meta []byte)) {
	return func(key string, value []byte, put func(sub, meta []byte)) {
		v, err := parse(value)
		if err != nil || v.Mark != nil {
			return
		}
		buf := make([]byte, 0, 9+len(key)+32)
		// Fired first: a position also pending is indexed as pending.
		for _, t := range v.Fired {
			put(subKey(buf, kindDue, t.Due, key, t.ID), []byte{firedMeta})
		}
		held := false
		for _, t := range v.Pending {
			if t.Held {
				put(subKey(buf, kindHeld, t.Due, key, t.ID), nil)
				held = true
				continue
			}
			put(subKey(buf, kindDue, t.Due, key, t.ID), []byte{0})
			if t.Deferred {
				put(subKey(buf, kindDeferred, t.Due, key, t.ID), nil)
			}
		}
		if !held {
			put(subKey(buf, kindRetention, v.LastActive, key, ""), nil)
		}
	}
}

// subKey appends to buf[:0] the entry's sub: kind, due, user, task.
func subKey(buf []byte, kind byte, due int64, user, task string) []byte {
	b := append(buf[:0], kind)
	b = binary.BigEndian.AppendUint64(b, uint64(due)^1<<63)
	return append(append(b, user...), task...)
}

// bound is the sub of the first entry of kind at or after due.
func bound(kind byte, due int64) []byte { return subKey(nil, kind, due, "", "") }

// kindEnd is the sub after every entry of kind.
func kindEnd(kind byte) []byte { return []byte{kind + 1} }

// parseSub reads an entry of key: its due time and task.
func parseSub(sub []byte, key string) (due int64, task string, err error) {
	if len(sub) < 9+len(key) || string(sub[9:9+len(key)]) != key {
		return 0, "", fmt.Errorf("due index entry %q of key %q malformed", sub, key)
	}
	return int64(binary.BigEndian.Uint64(sub[1:9]) ^ 1<<63), string(sub[9+len(key):]), nil
}

// readEntries calls fn in sub order with the parsed entries of st whose
// sub is in [from, to), until fn returns false. Every entry is written by
// Entries, so one that does not parse is a damaged store: it is an error,
// for skipping it would skip a follow-up.
func readEntries(st Store, from, to []byte, fn func(sub []byte, due int64, key, task string, meta []byte) bool) error {
	var bad error
	err := st.IndexRange(from, to, func(sub []byte, key string, meta []byte) bool {
		due, task, err := parseSub(sub, key)
		if err != nil {
			bad = err
			return false
		}
		return fn(sub, due, key, task, meta)
	})
	return errors.Join(err, bad)
}

// setStore makes the index keep a window of st's entries (see the package
// comment on disk.go) from now on: it reads the held follow-ups, the
// replay candidates (Checkpoint, Through] and the first window. Call it
// after the mark was read (Update of the mark's value), before any other
// update, on the partition's goroutine.
func (x *Index) setStore(st Store, now time.Time) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.src = st
	x.hReady = x.mark.Through.Due
	if x.mark.Through.IsZero() {
		x.hReady = math.MinInt64
	}
	x.nextReady = x.hReady // until the first fill: the window is empty
	x.rAct, x.nextRet = math.MinInt64, math.MaxInt64
	if x.retain > 0 {
		x.nextRet = math.MinInt64 // until the first fill
	}
	x.deferred.Clear(false)
	err := readEntries(st, bound(kindHeld, math.MinInt64), kindEnd(kindHeld), func(_ []byte, due int64, key, task string, _ []byte) bool {
		x.add(x.timers, Pos{due, key, task})
		return true
	})
	if err == nil && x.recent != nil && x.mark.Checkpoint.Less(x.mark.Through) {
		err = x.readFired(x.mark.Checkpoint, x.mark.Through, false, func(p Pos) { x.recent.ReplaceOrInsert(p) })
	}
	if err == nil {
		err = x.fill(now.UnixNano())
	}
	return err
}

// readFired calls fn with every position in (from, to] the store's 'd'
// entries hold, fired or pending, held ones too if held. Called with x.mu
// held.
func (x *Index) readFired(from, to Pos, held bool, fn func(Pos)) error {
	read := func(kind byte) error {
		return readEntries(x.src, bound(kind, from.Due), bound(kind, to.Due+1), func(_ []byte, due int64, key, task string, _ []byte) bool {
			if p := (Pos{due, key, task}); from.Less(p) && !to.Less(p) {
				fn(p)
			}
			return true
		})
	}
	err := read(kindDue)
	if err == nil && held {
		err = read(kindHeld)
	}
	return err
}

// Fill moves the window's ends at least fillAhead/2 past now, reading
// the store's entries between the old and new ends (at most fillBatch of a
// kind a call, none into a window holding fillBatch already). The tick calls it first, on the partition's goroutine,
// where no write of the table can come between its reads and the index.
// An index without a store has nothing to fill.
func (x *Index) Fill(now time.Time) error {
	x.mu.Lock()
	err := x.fill(now.UnixNano())
	x.mu.Unlock()
	return err
}

func (x *Index) fill(now int64) error {
	if x.src == nil {
		return nil
	}
	// A window already holding a batch is not filled further: behind the
	// clock (a backlog), the ticks take it first.
	if x.hReady <= now+fillAhead/2 && x.ready.Len() < fillBatch {
		h, next, n, err := x.readAhead(kindDue, x.hReady, now+fillAhead, func(due int64, key, task string, meta []byte) bool {
			p := Pos{due, key, task}
			if (len(meta) > 0 && meta[0] == firedMeta) || !x.mark.Through.Less(p) {
				return false
			}
			x.add(x.ready, p)
			return true
		})
		if err != nil {
			return fmt.Errorf("fill the due index: %w", err)
		}
		x.hReady, x.nextReady = max(h, x.hReady), next
		x.outside -= n // counted beyond the window until now
	}
	if x.retain > 0 && x.rAct <= now+fillAhead/2-x.retain && x.timers.Len() < fillBatch {
		h, next, _, err := x.readAhead(kindRetention, x.rAct, now+fillAhead-x.retain, func(act int64, key, _ string, _ []byte) bool {
			x.add(x.timers, Pos{act + x.retain, key, RetentionTask})
			return true
		})
		if err != nil {
			return fmt.Errorf("fill the due index's retention timers: %w", err)
		}
		if next != math.MaxInt64 {
			next += x.retain
		}
		x.rAct, x.nextRet = max(h, x.rAct), next
	}
	return nil
}

// readAhead reads the store's entries of kind from time from up to target
// (at most fillBatch taken, and then the rest of the last time read, for
// Pos order within a time needs them all), handing each to take, which
// reports whether it took it. It returns the window's new end h, the
// first time beyond it next (math.MaxInt64: none) and how many were taken.
// Called with x.mu held.
func (x *Index) readAhead(kind byte, from, target int64, take func(t int64, key, task string, meta []byte) bool) (h, next int64, n int, err error) {
	last := int64(math.MinInt64)
	h, next = target, math.MaxInt64
	err = readEntries(x.src, bound(kind, from), kindEnd(kind), func(_ []byte, t int64, key, task string, meta []byte) bool {
		if t >= target || n >= fillBatch && t != last {
			h, next = min(t, target), t
			return false
		}
		last = t
		if take(t, key, task, meta) {
			n++
		}
		return true
	})
	return h, next, n, err
}

// readyInWindow reports whether a pending follow-up at p belongs in
// memory, or else lowers the bound of those beyond the window and reports
// whether that made it earlier. Called with x.mu held.
func (x *Index) readyInWindow(p Pos) (in, earlier bool) {
	if p.Due < x.hReady {
		return true, false
	}
	if p.Due < x.nextReady {
		x.nextReady = p.Due
		return false, true
	}
	return false, false
}

// retentionInWindow is readyInWindow for the retention timer of a user
// last active at act.
func (x *Index) retentionInWindow(act int64) (in, earlier bool) {
	if act < x.rAct {
		return true, false
	}
	if act+x.retain < x.nextRet {
		x.nextRet = act + x.retain
		return false, true
	}
	return false, false
}

// sweepStore is SweepDeferred's read of the store's deferred entries:
// up to max after the last one handed out, in the store's order.
func (x *Index) sweepStore(max int) ([]Pos, error) {
	from := bound(kindDeferred, math.MinInt64)
	if x.sweep.afterSub != nil {
		from = append(slices.Clone(x.sweep.afterSub), 0)
	}
	var ps []Pos
	err := readEntries(x.src, from, kindEnd(kindDeferred), func(sub []byte, due int64, key, task string, _ []byte) bool {
		if max > 0 && len(ps) == max {
			return false
		}
		x.sweep.afterSub = append(x.sweep.afterSub[:0], sub...)
		if p := (Pos{due, key, task}); x.mark.Through.Less(p) {
			ps = append(ps, p)
		}
		return true
	})
	return ps, err
}

// upcomingStore reads up to max pending follow-ups after after from the
// store, at or after the window's end, in firing order. Called with x.mu
// held.
func (x *Index) upcomingStore(after Pos, max int) ([]Pos, error) {
	var out []Pos
	last := int64(math.MinInt64)
	err := readEntries(x.src, bound(kindDue, after.Due), kindEnd(kindDue), func(_ []byte, due int64, key, task string, meta []byte) bool {
		if len(out) >= max && due != last {
			return false // the due time's entries are all read: Pos order within it needs them all
		}
		last = due
		if p := (Pos{due, key, task}); due >= x.hReady && (len(meta) == 0 || meta[0] != firedMeta) && after.Less(p) && x.mark.Through.Less(p) {
			out = append(out, p)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("list the follow-ups due from %s: %w", after.Time().UTC().Format(time.RFC3339Nano), err)
	}
	slices.SortFunc(out, Compare)
	if len(out) > max {
		out = out[:max]
	}
	return out, nil
}

// FiredBetween, for an index with a store, reads the positions in (from,
// to] from the store's entries, in firing order.
func (x *Index) firedBetween(from, to Pos) ([]Pos, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []Pos
	err := x.readFired(from, to, true, func(p Pos) { out = append(out, p) })
	slices.SortFunc(out, Compare)
	out = slices.CompactFunc(out, func(a, b Pos) bool { return a == b })
	return out, err
}

// Windowed reports whether the index keeps a window of its store's due
// order (else it holds every pending follow-up).
func (x *Index) Windowed() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.src != nil
}

// countChunk is how many entries CountBeyond reads under one snapshot.
const countChunk = 100000

// CountBeyond counts the pending follow-ups beyond the window in the
// store, for Backlog, in chunks, without holding the index: run it in a
// goroutine after the open. Writes during the count may be counted twice
// or not at all (the count is for a gauge). It ends early, leaving
// Backlog without them, when the store cannot be read (closed).
func (x *Index) CountBeyond() {
	x.mu.Lock()
	st, from := x.src, x.hReady
	x.outside = 0
	x.mu.Unlock()
	if st == nil {
		return
	}
	sub, n := bound(kindDue, from), 0
	for {
		read := 0
		err := st.IndexRange(sub, kindEnd(kindDue), func(s []byte, _ string, meta []byte) bool {
			if read == countChunk {
				sub = slices.Clone(s)
				return false
			}
			read++
			if len(meta) == 0 || meta[0] != firedMeta {
				n++
			}
			return true
		})
		if err != nil {
			return
		}
		if read < countChunk {
			break
		}
	}
	x.mu.Lock()
	x.counted, x.countDone = n, true
	x.mu.Unlock()
}
