package dueindex

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex/dueindextest"
)

// newDiskMemory is a memory store that keeps the entries of Entries beside
// its values, as internal/localstore's stores do with Stores.Index.
func newDiskMemory() *dueindextest.Store {
	return dueindextest.New(storage.NewMemory(), EntriesVersion, Entries(parse))
}

// smallWindow makes the window small for the test: ahead seconds ahead, at
// most batch entries a fill.
func smallWindow(t *testing.T, ahead time.Duration, batch int) {
	oldAhead, oldBatch := fillAhead, fillBatch
	fillAhead, fillBatch = int64(ahead), batch
	t.Cleanup(func() { fillAhead, fillBatch = oldAhead, oldBatch })
}

// With a store that keeps the due order, the index keeps only a window in
// memory, and yet fires as a scan of the table says: each tick (a Fill,
// then TakeDue) takes exactly the earliest due follow-ups after the mark
// (none early, none skipped, none twice), and Next is never after the
// earliest pending one; through sets, deletes, unreadable values, the mark
// moving, and a reopen of the same store, after which the replay
// candidates are every fired follow-up in (Checkpoint, Through].
func TestWindowFiresAsTheTableSays(t *testing.T) {
	smallWindow(t, 30*time.Second, 4)
	for seed := uint64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		p := newTestPunctuator(t, clock.NewFake(t0), nil)
		inner := newDiskMemory()
		st := open(t, p, "tbl", 3, inner)
		if !p.Index(3).Windowed() {
			t.Fatal("the index did not take the store's due order")
		}
		p.Index(3).Replayed(Pos{})
		var mark Mark
		now := t0
		maxWindow := 0
		for i := 0; i < 1500; i++ {
			x := p.Index(3)
			key := string(rune('a' + rng.IntN(50)))
			var err error
			switch r := rng.IntN(10); {
			case r < 1:
				err = st.Delete(key)
			case r < 2:
				err = st.Set(key, []byte("{}"))
			case r < 4: // a tick
				now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
				if err := x.Fill(now); err != nil {
					t.Fatal(err)
				}
				maxWindow = max(maxWindow, x.Len())
				want, _ := scan(t, inner)
				k := 1 + rng.IntN(5)
				var wantDue []Pos
				for _, w := range want {
					if len(wantDue) == k || w.Time().After(now) {
						break
					}
					wantDue = append(wantDue, w)
				}
				// A fill reads at most fillBatch: the next ticks (at the
				// same time here) take the rest.
				var due []Pos
				for len(due) < len(wantDue) {
					more := x.TakeDue(now, k-len(due))
					if len(more) == 0 {
						break
					}
					due = append(due, more...)
					if err := x.Fill(now); err != nil {
						t.Fatal(err)
					}
				}
				if !slices.Equal(due, wantDue) {
					t.Fatalf("seed %d op %d: tick at t0+%v took %v, want %v", seed, i, now.Sub(t0), due, wantDue)
				}
				if len(due) == 0 {
					continue
				}
				if rng.IntN(3) == 0 {
					mark.Checkpoint, mark.Staged = mark.Staged, mark.Through
				}
				mark.Through = due[len(due)-1]
				err = st.Set(markKey, encValue(Value{Mark: &mark}))
			default:
				_, _ = st.Get(key)
				err = st.Set(key, randomValue(rng, mark))
			}
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := scan(t, inner); len(want) > 0 {
				if at, ok := x.Next(); !ok || at.After(want[0].Time()) {
					t.Fatalf("seed %d op %d: next tick %v (%v), earliest pending %v", seed, i, at.Sub(t0), ok, want[0])
				}
			}
		}
		if maxWindow >= 100 {
			t.Errorf("seed %d: the window held up to %d follow-ups, want it small", seed, maxWindow)
		}
		_, wantFired := scan(t, inner)
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		st = open(t, p, "tbl", 3, inner)
		fired, scanTo := p.Index(3).Replayed(Pos{})
		if scanTo != mark.Checkpoint {
			t.Fatalf("seed %d: scan to %v with checkpoint %v", seed, scanTo, mark.Checkpoint)
		}
		for _, f := range wantFired {
			if _, found := slices.BinarySearchFunc(fired, f, Compare); !found {
				t.Fatalf("seed %d: replay misses %v (has %v)", seed, f, fired)
			}
		}
		// The reopened window starts at the mark's due time: a tick takes
		// what is due after the mark, not what is at or before it.
		x := p.Index(3)
		for range 3 {
			now = now.Add(time.Duration(rng.IntN(40)) * time.Second)
			want, _ := scan(t, inner)
			var due, wantDue []Pos
			for _, w := range want {
				if !w.Time().After(now) {
					wantDue = append(wantDue, w)
				}
			}
			for {
				if err := x.Fill(now); err != nil {
					t.Fatal(err)
				}
				more := x.TakeDue(now, 0)
				if len(more) == 0 {
					break
				}
				due = append(due, more...)
			}
			if !slices.Equal(due, wantDue) {
				t.Fatalf("seed %d: after the reopen, a tick at t0+%v took %v, want %v", seed, now.Sub(t0), due, wantDue)
			}
			if len(due) > 0 {
				mark.Through = due[len(due)-1]
				if err := st.Set(markKey, encValue(Value{Mark: &mark})); err != nil {
					t.Fatal(err)
				}
			}
		}
		older, err := p.FiredBetween(3, Pos{}, mark.Checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range older {
			if mark.Checkpoint.Less(f) {
				t.Fatalf("seed %d: FiredBetween(0, checkpoint) returned %v after it", seed, f)
			}
		}
	}
}

// With a store, held follow-ups are timers from the open, retention timers
// come into the window as the clock nears them, and the deferred
// follow-ups are swept from the store, a batch a call, after the mark only.
func TestWindowTimersAndSweep(t *testing.T) {
	smallWindow(t, 20*time.Second, 2)
	retain := time.Minute
	clk := clock.NewFake(t0)
	p := newTestPunctuator(t, clk, nil, func(c *Config) { c.Retain = retain })
	inner := newDiskMemory()
	var deferred []Pos
	for i := range 5 {
		user := string(rune('a' + i))
		due := t0.Add(time.Duration(i+1) * time.Hour)
		v := Value{Pending: []Task{{Due: due.UnixNano(), ID: "t", Deferred: true}}, LastActive: due.UnixNano()}
		deferred = append(deferred, Pos{due.UnixNano(), user, "t"})
		if err := inner.Set(user, encValue(v)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 6 { // idle users, last active 10 s apart
		act := t0.Add(time.Duration(i*10) * time.Second)
		if err := inner.Set("idle"+string(rune('0'+i)), encValue(Value{LastActive: act.UnixNano()})); err != nil {
			t.Fatal(err)
		}
	}
	heldAt := t0.Add(-time.Minute) // before the mark, held for this host's clock
	if err := inner.Set("h", encValue(Value{Pending: []Task{{Due: heldAt.UnixNano(), ID: "t", Held: true}}, LastActive: heldAt.UnixNano()})); err != nil {
		t.Fatal(err)
	}
	mark := Mark{Through: Pos{Due: t0.UnixNano(), User: "zz"}}
	if err := inner.Set(markKey, encValue(Value{Mark: &mark})); err != nil {
		t.Fatal(err)
	}
	st := open(t, p, "tbl", 0, inner)
	x := p.Index(0)
	if got := x.Timers(); len(got) != 1 || got[0].User != "h" {
		t.Fatalf("timers at the open %v, want the held follow-up only", got)
	}
	if got := x.TakeTimers(t0, 0); len(got) != 1 || got[0].User != "h" {
		t.Fatalf("due timers %v, want the held one", got)
	}
	var expired []string
	for now := t0; now.Before(t0.Add(3 * time.Minute)); now = now.Add(5 * time.Second) {
		if at, ok := x.Next(); len(expired) < 6 && (!ok || at.After(t0.Add(retain+time.Duration(len(expired)*10)*time.Second))) {
			t.Fatalf("at t0+%v: next %v (%v) after the next retention timer", now.Sub(t0), at, ok)
		}
		if err := x.Fill(now); err != nil {
			t.Fatal(err)
		}
		for _, tm := range x.TakeTimers(now, 0) {
			if tm.Time().After(now) {
				t.Fatalf("timer %v taken early at t0+%v", tm, now.Sub(t0))
			}
			if tm.Task != RetentionTask {
				t.Fatalf("unexpected timer %v", tm)
			}
			expired = append(expired, tm.User)
		}
		if len(x.Timers()) > 3 {
			t.Fatalf("at t0+%v: %d timers in memory, want the window's", now.Sub(t0), len(x.Timers()))
		}
	}
	slices.Sort(expired)
	if want := []string{"idle0", "idle1", "idle2", "idle3", "idle4", "idle5"}; !slices.Equal(expired, want) {
		t.Fatalf("retention timers fired %v, want %v", expired, want)
	}

	var swept []Pos
	for {
		ps, done, err := x.SweepDeferred("v2", 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) > 2 {
			t.Fatalf("a batch of %d, want at most 2", len(ps))
		}
		swept = append(swept, ps...)
		if done {
			break
		}
	}
	slices.SortFunc(swept, Compare)
	if !slices.Equal(swept, deferred) {
		t.Fatalf("swept %v, want %v", swept, deferred)
	}
	// The mark passes the first deferred follow-up: a new sweep skips it.
	mark.Through = deferred[0]
	if err := st.Set(markKey, encValue(Value{Mark: &mark})); err != nil {
		t.Fatal(err)
	}
	if ps, done, err := x.SweepDeferred("v3", 0); err != nil || !done || !slices.Equal(ps, deferred[1:]) {
		t.Fatalf("sweep after the mark: %v %v %v, want %v", ps, done, err, deferred[1:])
	}
	if got := mustUpcoming(t, x, Pos{}, 3); !slices.Equal(got, deferred[1:4]) {
		t.Fatalf("upcoming %v, want %v (beyond the window, from the store)", got, deferred[1:4])
	}
}

// damagedStore holds one due entry whose sub does not carry its key.
type damagedStore struct{}

func (damagedStore) IndexVersion() string { return EntriesVersion }

func (damagedStore) IndexRange(from, to []byte, fn func(sub []byte, key string, meta []byte) bool) error {
	sub := subKey(nil, kindDue, t0.UnixNano(), "someone-else", "t1")
	if string(sub) >= string(from) && (to == nil || string(sub) < string(to)) {
		fn(sub, "user", []byte{0})
	}
	return nil
}

// An entry that does not parse is a damaged store: reading the window
// fails (the tick fails its partition) instead of skipping a follow-up.
func TestDamagedEntryFailsTheFill(t *testing.T) {
	x := NewIndex(nil)
	err := x.setStore(damagedStore{}, t0)
	if err == nil {
		t.Fatal("a due entry that does not parse was skipped; want an error")
	}
	if !strings.Contains(err.Error(), "malformed") {
		t.Fatalf("error %q does not say the entry is malformed", err)
	}
}

// brokenStore reads nothing while it works and fails once broken.
type brokenStore struct{ broken bool }

func (*brokenStore) IndexVersion() string { return EntriesVersion }

func (s *brokenStore) IndexRange(from, to []byte, fn func(sub []byte, key string, meta []byte) bool) error {
	if s.broken {
		return errors.New("input/output error")
	}
	return nil
}

// Upcoming reports a store it cannot read beyond the window: the admin
// API answers with the error, not with a list that looks complete.
func TestUpcomingReportsAnUnreadableStore(t *testing.T) {
	st := &brokenStore{}
	x := NewIndex(nil)
	if err := x.setStore(st, t0); err != nil {
		t.Fatal(err)
	}
	if ps := mustUpcoming(t, x, Pos{}, 3); len(ps) != 0 {
		t.Fatalf("upcoming %v of an empty store", ps)
	}
	st.broken = true
	ps, err := x.Upcoming(Pos{}, 3)
	if err == nil || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("Upcoming of a store that cannot be read: %v, %v; want its error", ps, err)
	}
}
