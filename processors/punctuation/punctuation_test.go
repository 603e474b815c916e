package punctuation

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/internal/clock"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// A test table value: 8 bytes of unix nanoseconds, or empty for nothing pending.
func enc(due time.Time) []byte { return binary.BigEndian.AppendUint64(nil, uint64(due.UnixNano())) }

func earliest(v []byte) (time.Time, bool, error) {
	switch len(v) {
	case 0:
		return time.Time{}, false, nil
	case 8:
		return time.Unix(0, int64(binary.BigEndian.Uint64(v))), true, nil
	}
	return time.Time{}, false, errors.New("bad value")
}

func newTestPunctuator(t *testing.T, clk clock.Clock, send func(int32) error) *Punctuator {
	t.Helper()
	p, err := New(Config{Table: "tbl", Earliest: earliest, Send: send, Clock: clk,
		MinGap: 10 * time.Millisecond, Heartbeat: time.Second, TickTimeout: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func open(t *testing.T, p *Punctuator, topic string, part int32, inner storage.Storage) storage.Storage {
	t.Helper()
	st, err := p.StorageBuilder(func(string, int32) (storage.Storage, error) { return inner, nil })(topic, part)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	return st
}

// scan computes what the index must hold from the table itself.
func scan(t *testing.T, st storage.Storage) map[string]time.Time {
	t.Helper()
	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	defer it.Release()
	m := map[string]time.Time{}
	for it.Next() {
		v, _ := it.Value()
		if due, ok, _ := earliest(v); ok {
			m[string(it.Key())] = due
		}
	}
	return m
}

func equal(a, b map[string]time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !w.Equal(v) {
			return false
		}
	}
	return true
}

// The index always equals a scan of the table: through sets, deletes,
// values with nothing pending, a reopen of the same store, and a recovery
// that replays the writes into an empty store.
func TestIndexEqualsTableScan(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		p := newTestPunctuator(t, clock.NewFake(t0), nil)
		inner := storage.NewMemory()
		st := open(t, p, "tbl", 3, inner)
		type op struct {
			key string
			val []byte
			del bool
		}
		var log []op
		for i := 0; i < 2000; i++ {
			key := string(rune('a' + rng.IntN(50)))
			o := op{key: key}
			switch r := rng.IntN(10); {
			case r < 2:
				o.del = true
			case r < 3:
				o.val = []byte{}
			default:
				o.val = enc(t0.Add(time.Duration(rng.IntN(1000)) * time.Second))
			}
			var err error
			if o.del {
				err = st.Delete(o.key)
			} else {
				err = st.Set(o.key, o.val)
			}
			if err != nil {
				t.Fatal(err)
			}
			log = append(log, o)
			if rng.IntN(7) == 0 { // hand out and lease some, which must not change what is pending
				p.Index(3).TakeDue(t0.Add(time.Duration(rng.IntN(1000))*time.Second), time.Second, 5)
			}
			if got, want := p.Index(3).Pending(), scan(t, inner); !equal(got, want) {
				t.Fatalf("seed %d op %d: index %v, scan %v", seed, i, got, want)
			}
		}
		want := scan(t, inner)

		// Reopen over the same store: the index is rebuilt from it.
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if p.Index(3) != nil {
			t.Fatal("closed partition still registered")
		}
		open(t, p, "tbl", 3, inner)
		if got := p.Index(3).Pending(); !equal(got, want) {
			t.Fatalf("seed %d after reopen: index %v, want %v", seed, got, want)
		}

		// Recovery: the changelog replayed into an empty store.
		fresh := storage.NewMemory()
		rec := open(t, p, "tbl", 3, fresh)
		for _, o := range log {
			if o.del {
				_ = rec.Delete(o.key)
			} else {
				_ = rec.Set(o.key, o.val)
			}
		}
		if got := p.Index(3).Pending(); !equal(got, want) {
			t.Fatalf("seed %d after recovery: index %v, want %v", seed, got, want)
		}
	}
}

func TestOtherTopicsAreNotIndexed(t *testing.T) {
	p := newTestPunctuator(t, clock.NewFake(t0), nil)
	st := open(t, p, "other", 0, storage.NewMemory())
	if _, ok := st.(*indexed); ok || p.Index(0) != nil {
		t.Fatal("a storage of another topic was indexed")
	}
}

func TestTakeDueOrderLimitAndLease(t *testing.T) {
	x := NewIndex(nil)
	x.Update("late", t0.Add(time.Hour), true)
	x.Update("b", t0.Add(2*time.Second), true)
	x.Update("a", t0.Add(time.Second), true)
	x.Update("c", t0.Add(3*time.Second), true)

	if got := x.TakeDue(t0, time.Minute, 0); len(got) != 0 {
		t.Fatalf("nothing is due at t0, got %v", got)
	}
	now := t0.Add(3 * time.Second)
	got := x.TakeDue(now, time.Minute, 2)
	if len(got) != 2 || got[0].User != "a" || got[1].User != "b" || !got[0].At.Equal(t0.Add(time.Second)) {
		t.Fatalf("got %v, want a, b", got)
	}
	got = x.TakeDue(now, time.Minute, 0)
	if len(got) != 1 || got[0].User != "c" {
		t.Fatalf("got %v, want c", got)
	}
	// Leased: not offered again until the lease ends.
	if got := x.TakeDue(now.Add(59*time.Second), time.Minute, 0); len(got) != 0 {
		t.Fatalf("leased users offered again: %v", got)
	}
	if next, ok := x.Next(); !ok || !next.Equal(now.Add(time.Minute)) {
		t.Fatalf("next %v %v, want the lease end", next, ok)
	}
	// A user whose value changed is offered again at once (if still due);
	// one that fired (nothing pending) is gone.
	x.Update("a", t0, true)
	x.Update("b", time.Time{}, false)
	got = x.TakeDue(now.Add(59*time.Second), time.Minute, 0)
	if len(got) != 1 || got[0].User != "a" {
		t.Fatalf("got %v, want a", got)
	}
	// Leases end: a and c come back, in due order; b never.
	got = x.TakeDue(now.Add(3*time.Minute), time.Minute, 0)
	if len(got) != 2 || got[0].User != "a" || got[1].User != "c" {
		t.Fatalf("got %v, want a, c after their leases ended", got)
	}
	if x.Len() != 3 {
		t.Fatalf("len %d, want 3 (late, c, a)", x.Len())
	}
}

func TestUpdateNotifiesOnlyWhenEarliestMovesEarlier(t *testing.T) {
	var told []time.Time
	x := NewIndex(func(at time.Time) { told = append(told, at) })
	x.Update("a", t0.Add(time.Minute), true)
	x.Update("b", t0.Add(2*time.Minute), true)
	x.Update("c", t0.Add(time.Second), true)
	if len(told) != 2 || !told[1].Equal(t0.Add(time.Second)) {
		t.Fatalf("told %v, want the first insert and c", told)
	}
}

type sends struct{ parts []int32 }

func (s *sends) send(p int32) error { s.parts = append(s.parts, p); return nil }
func (s *sends) take() []int32      { out := s.parts; s.parts = nil; return out }

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
	// One tick in flight at a time.
	if wait := p.round(); wait != 3*time.Second || len(s.take()) != 0 {
		t.Fatalf("outstanding tick: wait %v", wait)
	}
	p.Ticked(2)
	if err := st.Set("u", enc(t0.Add(5*time.Second))); err != nil {
		t.Fatal(err)
	}
	if wait := p.round(); wait != time.Second || len(s.take()) != 0 {
		t.Fatalf("due in 5s: wait %v, want the 1s heartbeat", wait)
	}
	clk.Advance(time.Second)
	p.round() // heartbeat
	if got := s.take(); len(got) != 1 {
		t.Fatalf("heartbeat: sent %v", got)
	}
	p.Ticked(2)
	clk.Set(t0.Add(1500 * time.Millisecond))
	if wait := p.round(); wait != 500*time.Millisecond || len(s.take()) != 0 {
		t.Fatalf("wait %v, want until the next heartbeat", wait)
	}
	clk.Set(t0.Add(4900 * time.Millisecond))
	p.round()
	p.Ticked(2)
	clk.Set(t0.Add(4950 * time.Millisecond))
	if wait := p.round(); wait != 50*time.Millisecond || len(s.take()) != 1 {
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
	p := newTestPunctuator(t, clk, func(int32) error {
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
