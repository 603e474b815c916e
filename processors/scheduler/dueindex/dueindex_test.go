package dueindex

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/internal/clock"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Test table values are Values in JSON.
func encValue(v Value) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// enc is a value with one pending follow-up "t" due at due.
func enc(due time.Time) []byte {
	return encValue(Value{Pending: []Task{{Due: due.UnixNano(), ID: "t"}}})
}

func parse(b []byte) (*Value, error) {
	var v Value
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

const markKey = "mark"

func newTestPunctuator(t *testing.T, clk clock.Clock, send func(int32, Pos) error, opts ...func(*Config)) *Punctuator {
	t.Helper()
	cfg := Config{Table: "tbl", Parse: parse, MarkKey: func(int32) string { return markKey }, Send: send, Clock: clk,
		MinGap: 10 * time.Millisecond, Recheck: time.Second, TickTimeout: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// open opens a partition's store as Goka does, restore writes (Goka
// restoring the table from its changelog) first.
func open(t *testing.T, p *Punctuator, topic string, part int32, inner storage.Storage, restore ...func(storage.Storage)) storage.Storage {
	t.Helper()
	st, err := p.StorageBuilder(func(string, int32) (storage.Storage, error) { return inner, nil })(topic, part)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	for _, r := range restore {
		r(st)
	}
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	return st
}

// scan computes from the table itself what the index must hold: the
// pending follow-ups after the mark, and the fired ones in
// (Checkpoint, Through] that a replay must find.
func scan(t *testing.T, st storage.Storage) (pending, fired []Pos) {
	t.Helper()
	var mark Mark
	if raw, _ := st.Get(markKey); raw != nil {
		if v, err := parse(raw); err == nil && v.Mark != nil {
			mark = *v.Mark
		}
	}
	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Release()
	for it.Next() {
		raw, _ := it.Value()
		v, err := parse(raw)
		if err != nil {
			continue
		}
		key := string(it.Key())
		for i, ts := range [][]Task{v.Pending, v.Fired} {
			for _, task := range ts {
				p := Pos{task.Due, key, task.ID}
				switch {
				case i == 0 && mark.Through.Less(p):
					pending = append(pending, p)
				case mark.Checkpoint.Less(p) && !mark.Through.Less(p):
					fired = append(fired, p)
				}
			}
		}
	}
	slices.SortFunc(pending, Compare)
	slices.SortFunc(fired, Compare)
	return slices.Compact(pending), slices.Compact(fired)
}

// randomValue is a user's value: up to three pending follow-ups with due
// times in t0+[0, 1000)s and up to two fired ones before the mark (as the
// scheduler records them), or (rarely) something unreadable.
func randomValue(rng *rand.Rand, mark Mark) []byte {
	if rng.IntN(40) == 0 {
		return []byte("not json")
	}
	var v Value
	for i := range rng.IntN(4) {
		v.Pending = append(v.Pending, Task{Due: t0.Add(time.Duration(rng.IntN(1000)) * time.Second).UnixNano(), ID: string(rune('p' + i))})
	}
	if span := mark.Through.Due - t0.UnixNano(); span > 0 {
		for i := range rng.IntN(3) {
			v.Fired = append(v.Fired, Task{Due: t0.UnixNano() + rng.Int64N(span), ID: "f" + string(rune('p'+i))})
		}
	}
	return encValue(v)
}

// The index always equals a scan of the table: through sets, deletes,
// unreadable values, follow-ups taken and a mark written after them (as the
// scheduler's tick does), a reopen of the same store, and a recovery that
// replays the writes into an empty store. After a reopen or recovery, the
// replay candidates include every fired follow-up in (Checkpoint, Through].
func TestIndexEqualsTableScan(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		p := newTestPunctuator(t, clock.NewFake(t0), nil)
		inner := storage.NewMemory()
		st := open(t, p, "tbl", 3, inner)
		p.Index(3).Replayed(Pos{}) // the first tick: live from here
		type op struct {
			key string
			val []byte
			del bool
		}
		var (
			log  []op
			mark Mark
		)
		apply := func(st storage.Storage, o op) {
			var err error
			if o.del {
				err = st.Delete(o.key)
			} else {
				err = st.Set(o.key, o.val)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 1500; i++ {
			o := op{key: string(rune('a' + rng.IntN(50)))}
			switch r := rng.IntN(10); {
			case r < 1:
				o.del = true
			case r < 2:
				o.val = []byte("{}")
			case r < 4: // a tick: take what is due, write the mark after it
				now := mark.Through.Time().Add(time.Duration(rng.IntN(60)) * time.Second)
				if mark.Through.IsZero() {
					now = t0
				}
				due := p.Index(3).TakeDue(now, 1+rng.IntN(5))
				if len(due) == 0 {
					continue
				}
				if rng.IntN(3) == 0 {
					mark.Checkpoint, mark.Staged = mark.Staged, mark.Through
				}
				mark.Through = due[len(due)-1]
				o = op{key: markKey, val: encValue(Value{Mark: &mark})}
			default:
				o.val = randomValue(rng, mark)
			}
			// A callback reads the value it then writes (the wrapper keeps
			// it); sometimes another key is read in between.
			switch rng.IntN(4) {
			case 0, 1:
				_, _ = st.Get(o.key)
			case 2:
				_, _ = st.Get(o.key)
				_, _ = st.Get(string(rune('a' + rng.IntN(50))))
			}
			apply(st, o)
			log = append(log, o)
			want, _ := scan(t, inner)
			if got := p.Index(3).Pending(); !slices.Equal(got, want) {
				t.Fatalf("seed %d op %d: index %v, scan %v", seed, i, got, want)
			}
		}
		want, wantFired := scan(t, inner)
		check := func(when string) {
			t.Helper()
			x := p.Index(3)
			if got := x.Pending(); !slices.Equal(got, want) {
				t.Fatalf("seed %d %s: index %v, want %v", seed, when, got, want)
			}
			fired, scanTo := x.Replayed(Pos{})
			if scanTo != mark.Checkpoint {
				t.Fatalf("seed %d %s: scan to %v with checkpoint %v", seed, when, scanTo, mark.Checkpoint)
			}
			for _, f := range wantFired {
				if _, found := slices.BinarySearchFunc(fired, f, Compare); !found {
					t.Fatalf("seed %d %s: replay misses %v (has %v)", seed, when, f, fired)
				}
			}
			for _, f := range fired {
				if !mark.Checkpoint.Less(f) || mark.Through.Less(f) {
					t.Fatalf("seed %d %s: replay candidate %v outside (%v, %v]", seed, when, f, mark.Checkpoint, mark.Through)
				}
			}
		}

		// Reopen over the same store: the index is rebuilt from it.
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if p.Index(3) != nil {
			t.Fatal("closed partition still registered")
		}
		open(t, p, "tbl", 3, inner)
		check("after reopen")

		// Recovery: the changelog replayed into an empty store.
		open(t, p, "tbl", 3, storage.NewMemory(), func(rec storage.Storage) {
			for _, o := range log {
				apply(rec, o)
			}
		})
		check("after recovery")
	}
}

func TestOtherTopicsAreNotIndexed(t *testing.T) {
	p := newTestPunctuator(t, clock.NewFake(t0), nil)
	st := open(t, p, "other", 0, storage.NewMemory())
	if _, ok := st.(*indexed); ok || p.Index(0) != nil {
		t.Fatal("a storage of another topic was indexed")
	}
}

func TestTakeDueOrderAndLimit(t *testing.T) {
	x := NewIndex(nil)
	x.Update("late", nil, &Value{Pending: []Task{{Due: t0.Add(time.Hour).UnixNano(), ID: "t"}}})
	x.Update("b", nil, &Value{Pending: []Task{{Due: t0.Add(2 * time.Second).UnixNano(), ID: "t"}}})
	x.Update("a", nil, &Value{Pending: []Task{{Due: t0.Add(time.Second).UnixNano(), ID: "t"}, {Due: t0.Add(3 * time.Second).UnixNano(), ID: "u"}}})

	if got := x.TakeDue(t0, 0); len(got) != 0 {
		t.Fatalf("nothing is due at t0, got %v", got)
	}
	now := t0.Add(3 * time.Second)
	got := x.TakeDue(now, 2)
	if len(got) != 2 || got[0].User != "a" || got[1].User != "b" || !got[0].Time().Equal(t0.Add(time.Second)) {
		t.Fatalf("got %v, want a, b", got)
	}
	got = x.TakeDue(now, 0)
	if len(got) != 1 || got[0].User != "a" || got[0].Task != "u" {
		t.Fatalf("got %v, want a's second", got)
	}
	if got := x.TakeDue(now, 0); len(got) != 0 {
		t.Fatalf("taken follow-ups offered again: %v", got)
	}
	if next, ok := x.Next(); !ok || !next.Equal(t0.Add(time.Hour)) || x.Len() != 1 {
		t.Fatalf("next %v %v len %d, want late only", next, ok, x.Len())
	}
	// A new value replaces the user's follow-ups.
	x.Update("late", &Value{Pending: []Task{{Due: t0.Add(time.Hour).UnixNano(), ID: "t"}}}, &Value{Pending: []Task{{Due: t0.UnixNano(), ID: "x"}}})
	if p := x.Pending(); len(p) != 1 || p[0].Task != "x" {
		t.Fatalf("pending %v", p)
	}
}

// The mark hides what it passed; a follow-up written at or before it counts
// as fired.
func TestMarkHidesFiredFollowUps(t *testing.T) {
	x := NewIndex(nil)
	x.Update("a", nil, &Value{Pending: []Task{{Due: t0.Add(time.Second).UnixNano(), ID: "t"}}})
	x.Update("b", nil, &Value{Pending: []Task{{Due: t0.Add(2 * time.Second).UnixNano(), ID: "t"}}})
	x.Update("m", nil, &Value{Mark: &Mark{Through: Pos{t0.Add(time.Second).UnixNano(), "a", "t"}}})
	if p := x.Pending(); len(p) != 1 || p[0].User != "b" {
		t.Fatalf("pending %v, want b", p)
	}
	if !x.Fired(Pos{t0.Add(time.Second).UnixNano(), "a", "t"}) || !x.Fired(Pos{t0.UnixNano(), "z", "t"}) || x.Fired(Pos{t0.Add(time.Second).UnixNano(), "a", "u"}) {
		t.Fatal("Fired disagrees with the mark")
	}
	x.Update("c", nil, &Value{Pending: []Task{{Due: t0.UnixNano(), ID: "t"}}})
	if x.Len() != 1 {
		t.Fatalf("a follow-up before the mark was indexed: %v", x.Pending())
	}
	// Kept for a replay until the first tick: a's and c's (after the zero checkpoint).
	fired, scanTo := x.Replayed(Pos{})
	if !scanTo.IsZero() || len(fired) != 2 || fired[0].User != "c" || fired[1].User != "a" {
		t.Fatalf("replay %v %v", fired, scanTo)
	}
	if fired, _ := x.Replayed(Pos{}); fired != nil || x.Replaying() {
		t.Fatal("replay candidates kept after Replayed")
	}
}

// A parked follow-up blocks what comes after it: TakeDue and Next stop
// before it (so the mark, moved to the last fired, cannot pass it), a
// put-back follow-up waits with the rest, and any write of the parked
// one's user releases it and tells the punctuator.
func TestParkedFollowUpBlocksWhatComesAfter(t *testing.T) {
	n := 0
	x := NewIndex(func() { n++ })
	task := func(d time.Duration, id string) Task { return Task{Due: t0.Add(d).UnixNano(), ID: id} }
	x.Update("a", nil, &Value{Pending: []Task{task(time.Second, "t")}})
	x.Update("b", nil, &Value{Pending: []Task{task(2*time.Second, "t")}})
	x.Update("c", nil, &Value{Pending: []Task{task(3*time.Second, "t")}})
	x.Update("d", nil, &Value{Pending: []Task{task(time.Hour, "t")}})
	now := t0.Add(5 * time.Second)
	due := x.TakeDue(now, 0) // a, b, c: the tick fires a, parks b, puts c back
	if len(due) != 3 {
		t.Fatalf("due %v", due)
	}
	x.Park(due[1])
	x.PutBack(due[2])
	if got := x.TakeDue(now, 0); len(got) != 0 {
		t.Fatalf("offered %v past a parked follow-up", got)
	}
	if next, ok := x.Next(); ok {
		t.Fatalf("next %v while blocked", next)
	}
	x.Update("a", nil, &Value{Pending: []Task{task(1500*time.Millisecond, "u")}}) // before the parked one: offered
	if got := x.TakeDue(now, 0); len(got) != 1 || got[0].User != "a" {
		t.Fatalf("got %v, want a's new follow-up", got)
	}
	n = 0
	// The user's callback moves b to tomorrow: released, and c comes due.
	x.Update("b", &Value{Pending: []Task{task(2*time.Second, "t")}}, &Value{Pending: []Task{task(24*time.Hour, "t")}})
	if n == 0 || len(x.Parked()) != 0 {
		t.Fatalf("release not told (%d) or still parked %v", n, x.Parked())
	}
	if got := x.TakeDue(now, 0); len(got) != 1 || got[0].User != "c" {
		t.Fatalf("got %v, want c", got)
	}
	// A write without the old value (a store read that failed) releases too.
	x.Park(Pos{Due: t0.Add(time.Hour).UnixNano(), User: "d", Task: "t"})
	x.Update("d", nil, &Value{})
	if len(x.Parked()) != 0 {
		t.Fatalf("parked %v", x.Parked())
	}
}

func TestUpdateNotifiesOnlyWhenEarliestMovesEarlier(t *testing.T) {
	n := 0
	x := NewIndex(func() { n++ })
	x.Update("a", nil, &Value{Pending: []Task{{Due: t0.Add(time.Minute).UnixNano(), ID: "t"}}})
	x.Update("b", nil, &Value{Pending: []Task{{Due: t0.Add(2 * time.Minute).UnixNano(), ID: "t"}}})
	x.Update("c", nil, &Value{Pending: []Task{{Due: t0.Add(time.Second).UnixNano(), ID: "t"}}})
	if n != 2 {
		t.Fatalf("told %d times, want the first insert and c", n)
	}
}

type sends struct{ parts []int32 }

func (s *sends) send(p int32, _ Pos) error { s.parts = append(s.parts, p); return nil }
func (s *sends) take() []int32             { out := s.parts; s.parts = nil; return out }

func TestRoundTicksWhenDue(t *testing.T) {
	clk := clock.NewFake(t0)
	var s sends
	p := newTestPunctuator(t, clk, s.send)
	if wait := p.round(); wait != time.Second || len(s.take()) != 0 {
		t.Fatalf("no partitions: wait %v", wait)
	}
	st := open(t, p, "tbl", 2, storage.NewMemory())

	// A new partition is ticked at once (it may hold past-due entries).
	p.round()
	if got := s.take(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("sent %v, want [2]", got)
	}
	// One tick in flight at a time; the punctuator looks again within
	// the recheck (1s).
	if wait := p.round(); wait != time.Second || len(s.take()) != 0 {
		t.Fatalf("outstanding tick: wait %v", wait)
	}
	p.Ticked(2)
	if err := st.Set("u", enc(t0.Add(5*time.Second))); err != nil {
		t.Fatal(err)
	}
	if wait := p.round(); wait != time.Second || len(s.take()) != 0 {
		t.Fatalf("due in 5s: wait %v, want the 1s recheck", wait)
	}
	clk.Advance(time.Second)
	if p.round(); len(s.take()) != 0 {
		t.Fatal("a recheck with nothing due sent a tick")
	}
	clk.Set(t0.Add(4950 * time.Millisecond))
	if wait := p.round(); wait != 50*time.Millisecond || len(s.take()) != 0 {
		t.Fatalf("wait %v, want until the due time", wait)
	}
	clk.Set(t0.Add(5 * time.Second))
	p.round()
	if got := s.take(); len(got) != 1 {
		t.Fatalf("due: sent %v", got)
	}
	// Unanswered: re-sent after the tick timeout, not before.
	clk.Set(t0.Add(7999 * time.Millisecond))
	p.round()
	if got := s.take(); len(got) != 0 {
		t.Fatalf("re-sent before the tick timeout: %v", got)
	}
	clk.Set(t0.Add(8 * time.Second))
	p.round()
	if got := s.take(); len(got) != 1 {
		t.Fatalf("not re-sent after the tick timeout: %v", got)
	}
}

func TestRoundRespectsMinGap(t *testing.T) {
	clk := clock.NewFake(t0)
	var s sends
	p := newTestPunctuator(t, clk, s.send)
	st := open(t, p, "tbl", 0, storage.NewMemory())
	if err := st.Set("u", enc(t0.Add(-time.Hour))); err != nil {
		t.Fatal(err)
	}
	p.round()
	p.Ticked(0)
	s.take()
	clk.Advance(4 * time.Millisecond)
	if wait := p.round(); wait != 6*time.Millisecond || len(s.take()) != 0 {
		t.Fatalf("wait %v, want the rest of the 10ms min gap", wait)
	}
}

func TestSendErrorIsRetried(t *testing.T) {
	clk := clock.NewFake(t0)
	fail := true
	var n int
	p := newTestPunctuator(t, clk, func(int32, Pos) error {
		n++
		if fail {
			return errors.New("broker down")
		}
		return nil
	})
	st := open(t, p, "tbl", 0, storage.NewMemory())
	if err := st.Set("u", enc(t0)); err != nil {
		t.Fatal(err)
	}
	p.round()
	fail = false
	clk.Advance(10 * time.Millisecond)
	p.round()
	if n != 2 {
		t.Fatalf("sends %d, want a retry after the failed send", n)
	}
}

// The index keeps the deferred follow-ups after the mark; a sweep hands
// them out in batches, once per policy version the mark has not recorded.
func TestIndexSweepsDeferredFollowUps(t *testing.T) {
	x := NewIndex(nil)
	d := func(due int64, id string) Task { return Task{Due: due, ID: id, Deferred: true} }
	x.Update("a", nil, &Value{Pending: []Task{d(10, "t1"), {Due: 11, ID: "t2"}}})
	x.Update("b", nil, &Value{Pending: []Task{d(20, "t1"), d(30, "t2")}})
	x.Update("c", nil, &Value{Pending: []Task{d(40, "t1")}})
	x.Update("c", &Value{Pending: []Task{d(40, "t1")}}, &Value{Pending: []Task{{Due: 40, ID: "t1"}}}) // no longer deferred
	if got, want := x.Deferred(), []Pos{{10, "a", "t1"}, {20, "b", "t1"}, {30, "b", "t2"}}; !slices.Equal(got, want) {
		t.Fatalf("deferred %v, want %v", got, want)
	}
	ps, done, _ := x.SweepDeferred("v1", 2)
	if !slices.Equal(ps, []Pos{{10, "a", "t1"}, {20, "b", "t1"}}) || done || !x.Sweeping() {
		t.Fatalf("first batch %v done %v", ps, done)
	}
	ps, done, _ = x.SweepDeferred("v1", 2)
	if !slices.Equal(ps, []Pos{{30, "b", "t2"}}) || !done || x.Sweeping() {
		t.Fatalf("second batch %v done %v", ps, done)
	}
	// The mark records the sweep and passes the first follow-up.
	x.Update("tick", nil, &Value{Mark: &Mark{Through: Pos{10, "a", "t1"}, Swept: "v1"}})
	if ps, _, _ := x.SweepDeferred("v1", 2); len(ps) != 0 {
		t.Fatalf("swept again under the same version: %v", ps)
	}
	if got := x.Deferred(); !slices.Equal(got, []Pos{{20, "b", "t1"}, {30, "b", "t2"}}) {
		t.Fatalf("deferred after the mark moved %v", got)
	}
	// A new version starts again from the first.
	if ps, done, _ := x.SweepDeferred("v2", 0); len(ps) != 2 || !done {
		t.Fatalf("sweep under v2: %v %v", ps, done)
	}
	x.Update("b", &Value{Pending: []Task{d(20, "t1"), d(30, "t2")}}, nil)
	if got := x.Deferred(); len(got) != 0 {
		t.Fatalf("deferred after b was deleted: %v", got)
	}
}

// cleanMemory is a memory store that closes cleanly at a changelog offset
// of the test's choice (as internal/localstore's does with nothing waiting).
type cleanMemory struct {
	storage.Storage
	offset int64
	clean  bool
}

func (m *cleanMemory) GetOffset(int64) (int64, error) { return m.offset, nil }
func (m *cleanMemory) ClosedClean() (int64, bool)     { return m.offset, m.clean }
func (m *cleanMemory) Close() error                   { return nil } // keeps the data, like a local store on disk
func (m *cleanMemory) Open() error                    { return nil }
func (m *cleanMemory) MarkRecovered() error           { return nil }
func (m *cleanMemory) SetOffset(offset int64) error   { m.offset = offset; return nil }
func (m *cleanMemory) set(t *testing.T, key string, v Value) {
	t.Helper()
	if err := m.Storage.Set(key, encValue(v)); err != nil {
		t.Fatal(err)
	}
}

// A partition closed cleanly and opened again with its store at the same
// offset takes its index back instead of scanning the store (a rebalance
// that leaves it here): same follow-ups, nothing parked, and a replay in
// the new session finds its fired follow-ups in the store. A store that
// moved on (records restored) or did not close cleanly is scanned again.
func TestIndexKeptAcrossCleanClose(t *testing.T) {
	p := newTestPunctuator(t, clock.NewFake(t0), nil)
	inner := &cleanMemory{Storage: storage.NewMemory(), offset: 41, clean: true}
	st := open(t, p, "tbl", 3, inner)
	p.Index(3).Replayed(Pos{})
	for i, u := range []string{"a", "b", "c"} {
		if err := st.Set(u, encValue(Value{Pending: []Task{{Due: t0.Add(time.Duration(i+1) * time.Second).UnixNano(), ID: "t"}}})); err != nil {
			t.Fatal(err)
		}
	}
	x := p.Index(3)
	taken := x.TakeDue(t0.Add(time.Second), 0) // a fires: the mark moves to it
	mark := Mark{Through: taken[0], LastTick: 9}
	if err := st.Set(markKey, encValue(Value{Mark: &mark})); err != nil {
		t.Fatal(err)
	}
	if err := st.Set("a", encValue(Value{Fired: []Task{{Due: t0.Add(time.Second).UnixNano(), ID: "t"}}})); err != nil {
		t.Fatal(err)
	}
	x.Park(x.TakeDue(t0.Add(2*time.Second), 0)[0]) // b waits for its user's callback
	// h's held follow-up is a timer; a tick takes it and wakes h, whose
	// callback has not written h's value yet.
	held := Pos{Due: t0.Add(5 * time.Second).UnixNano(), User: "h", Task: "held"}
	if err := st.Set("h", encValue(Value{Pending: []Task{{Due: held.Due, ID: "held", Held: true}}})); err != nil {
		t.Fatal(err)
	}
	if got := x.TakeTimers(held.Time(), 0); !slices.Equal(got, []Pos{held}) {
		t.Fatalf("timers taken %v", got)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	p.SessionEnded(true)

	st = open(t, p, "tbl", 3, inner)
	if p.Index(3) != x {
		t.Fatal("the index was built again, not kept")
	}
	want, _ := scan(t, inner)
	want = slices.DeleteFunc(want, func(q Pos) bool { return q == held }) // a timer, not pending
	if got := x.Pending(); !slices.Equal(got, want) || len(x.Parked()) != 0 || !x.Replaying() {
		t.Fatalf("kept index: pending %v (scan %v), parked %v, replaying %v", got, want, x.Parked(), x.Replaying())
	}
	if got := x.Timers(); !slices.Equal(got, []Pos{held}) {
		t.Fatalf("timers of the kept index %v, want the one woken before the close", got)
	}
	if fired, scanTo := x.Replayed(Pos{}); fired != nil || scanTo != mark.Through {
		t.Fatalf("Replayed = %v, %v; want none kept and a scan to the mark %v", fired, scanTo, mark.Through)
	}
	if fired, err := p.FiredBetween(3, Pos{}, mark.Through); err != nil || len(fired) != 1 || fired[0].User != "a" {
		t.Fatalf("FiredBetween = %v, %v", fired, err)
	}

	// Records restored since the close: scanned again.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	p.SessionEnded(true)
	inner.set(t, "d", Value{Pending: []Task{{Due: t0.Add(9 * time.Second).UnixNano(), ID: "t"}}})
	inner.offset++
	st = open(t, p, "tbl", 3, inner)
	if p.Index(3) == x {
		t.Fatal("an index kept over a store that moved on")
	}
	if got, want := p.Index(3).Pending(), func() []Pos {
		w, _ := scan(t, inner)
		return slices.DeleteFunc(w, func(q Pos) bool { return q == held })
	}(); !slices.Equal(got, want) || len(got) != 3 {
		t.Fatalf("rebuilt index %v, scan %v", got, want)
	}

	// An unclean close: scanned again.
	x = p.Index(3)
	inner.clean = false
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	p.SessionEnded(true)
	st = open(t, p, "tbl", 3, inner)
	if p.Index(3) == x {
		t.Fatal("an index kept across an unclean close")
	}

	// A clean close in a session that ended with a failed partition: scanned again.
	x = p.Index(3)
	inner.clean = true
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	p.SessionEnded(false)
	open(t, p, "tbl", 3, inner)
	if p.Index(3) == x {
		t.Fatal("an index kept across a failed session")
	}
}
