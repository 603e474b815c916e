package localstore

import (
	"fmt"
	"github.com/lovoo/goka/storage"
	"io"
	"testing"
)

// holdScans holds every scan of the keys before it reads its snapshot until
// the function returned is called.
func holdScans(t *testing.T) (release func()) {
	t.Helper()
	gate := make(chan struct{})
	scanStarts = func() { <-gate }
	t.Cleanup(func() { scanStarts = func() {} })
	return func() { close(gate) }
}

// waitScan waits for the scan of the keys started last.
func waitScan(s *store) {
	s.mu.Lock()
	done := s.scanned
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

// restored is a store of a fixture opened empty and restored with kv
// (key, value, ...), closed when the test ends.
func restored(t *testing.T, kv ...string) (*fixture, storage.Storage, *store) {
	t.Helper()
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	st := f.open(t, "table", 0)
	t.Cleanup(func() { mustClose(t, st) })
	restore(t, st, 0, kv...)
	return f, st, st.(*store)
}

// putUnder writes a value into the store's LevelDB behind its back, as
// nothing in the product does.
func putUnder(t *testing.T, s *store, key, value string) {
	t.Helper()
	if err := s.db.Put([]byte(key), []byte(value), nil); err != nil {
		t.Fatal(err)
	}
}

// A store that opened empty knows every key it holds: a read of a key it
// never wrote is answered without LevelDB. A key put into LevelDB behind
// the store's back shows it: the filter says it is absent.
func TestAbsentKeysAreAnsweredByTheFilter(t *testing.T) {
	f, st, s := restored(t, "a", "a0", "gone", "g0")
	putUnder(t, s, "ghost", "boo")
	if got := mustGet(t, st, "ghost"); got != "<nil>" {
		t.Fatalf("Get(ghost) = %s: a key the store never wrote was read from LevelDB", got)
	}
	e := f.set(t, st, "table", "b", "b0")
	f.fake.ack(e, 0, 10)
	f.set(t, st, "table", "c", "c0") // not acknowledged: in the overlay
	f.fake.ack(f.del(t, st, "table", "gone"), 0, 11)
	waitOffset(t, st, 11)
	for k, want := range map[string]string{"a": "a0", "b": "b0", "c": "c0", "gone": "<nil>", "never": "<nil>"} {
		if got := mustGet(t, st, k); got != want {
			t.Errorf("Get(%s) = %s, want %s", k, got, want)
		}
	}
	f.fake.ack(f.set(t, st, "table", "ghost", "written"), 0, 12)
	waitOffset(t, st, 12)
	if got := mustGet(t, st, "ghost"); got != "written" {
		t.Errorf("Get(ghost) = %s once the store wrote it, want written", got)
	}
}

// A store reopened with data reads its LevelDB's keys after the restore, in
// the background; until then its reads go to LevelDB. Keys written while
// the scan runs, acknowledged or not, are known once it ends.
func TestReusedStoreLearnsItsKeysAfterTheRestore(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	st := f.open(t, "table", 0)
	restore(t, st, 0, "a", "a0", "b", "b0")
	mustClose(t, st)

	release := holdScans(t)
	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	s := st.(*store)
	restore(t, st, 2, "c", "c0") // the changelog's tail, then the scan starts
	f.fake.ack(f.set(t, st, "table", "d", "d0"), 0, 10)
	waitOffset(t, st, 10)
	f.set(t, st, "table", "e", "e0") // not acknowledged: in the overlay
	putUnder(t, s, "ghost", "boo")
	if got := mustGet(t, st, "ghost"); got != "boo" {
		t.Fatalf("Get(ghost) = %s while the keys are not known, want LevelDB's boo", got)
	}
	release()
	waitScan(s)
	if got := mustGet(t, st, "ghost"); got != "<nil>" {
		t.Fatalf("Get(ghost) = %s after the scan: put after its snapshot by nobody's write, it should be unknown", got)
	}
	for k, want := range map[string]string{"a": "a0", "b": "b0", "c": "c0", "d": "d0", "e": "e0", "never": "<nil>"} {
		if got := mustGet(t, st, k); got != want {
			t.Errorf("Get(%s) = %s, want %s", k, got, want)
		}
	}
}

// Keys deleted stay in the filter; once it has grown past twice the keys it
// was built with, it is built again from the store's keys and forgets them.
func TestKeyFilterIsBuiltAgainWhenItDoubles(t *testing.T) {
	old := keysSlack
	keysSlack = 4
	t.Cleanup(func() { keysSlack = old })
	f, st, s := restored(t, "a", "a0")
	off := int64(10)
	ack := func(e int) {
		f.fake.ack(e, 0, off)
		waitOffset(t, st, off)
		waitScan(s)
		off++
	}
	for i := range 3 { // 4 keys: not past 2·1+4
		ack(f.set(t, st, "table", fmt.Sprint("k", i), "v"))
	}
	for i := range 3 {
		ack(f.del(t, st, "table", fmt.Sprint("k", i)))
	}
	s.mu.Lock()
	built, scanned := s.keysBuilt, s.scanned
	s.mu.Unlock()
	if built != 1 || scanned != nil {
		t.Fatalf("built with %d keys, scanned %v: want the filter of the restore (1 key) and no scan yet", built, scanned)
	}
	for i := range 3 { // 7 keys, past 6: built again
		ack(f.set(t, st, "table", fmt.Sprint("n", i), "v"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scanned == nil || s.keysBuilt != 4 {
		t.Fatalf("filter built with %d keys, want 4 (a and n0 to n2) after a scan (%v)", s.keysBuilt, s.scanned)
	}
	for i := range 3 {
		if k := fmt.Sprint("k", i); s.keys.mayHave(k) {
			t.Errorf("%s deleted before the scan is still in the filter", k)
		}
	}
}

// BenchmarkGetAbsent reads keys a store of 100,000 does not hold, as the
// dialer does for a user's first call: answered by the filter of the keys,
// and by LevelDB (the filter dropped).
func BenchmarkGetAbsent(b *testing.B) {
	for _, filter := range []bool{true, false} {
		b.Run(fmt.Sprint("filter=", filter), func(b *testing.B) {
			st := benchStore(b, 100_000)
			s := st.(*store)
			if !filter {
				s.mu.Lock()
				s.keys = nil
				s.mu.Unlock()
			}
			b.ResetTimer()
			for i := range b.N {
				if v, err := st.Get(fmt.Sprintf("absent-%09d", i)); err != nil || v != nil {
					b.Fatal(v, err)
				}
			}
		})
	}
}

// benchStore is a store restored with n keys of 150-byte values.
func benchStore(b *testing.B, n int) storage.Storage {
	b.Helper()
	f := &fixture{stores: New(b.TempDir(), newLogger(io.Discard))}
	st, err := f.stores.Builder()("table", 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Open(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	value := make([]byte, 150)
	for i := range n {
		if err := st.Set(fmt.Sprintf("user-%09d", i), value); err != nil {
			b.Fatal(err)
		}
		if err := st.SetOffset(int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.MarkRecovered(); err != nil {
		b.Fatal(err)
	}
	return st
}

// BenchmarkScanKeys is the background scan of a reused store's keys after
// its restore, per key of a store of 200,000.
func BenchmarkScanKeys(b *testing.B) {
	st := benchStore(b, 200_000)
	s := st.(*store)
	b.ResetTimer()
	for range b.N {
		s.mu.Lock()
		s.keys = nil
		s.startScan()
		s.mu.Unlock()
		waitScan(s)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/200_000, "ns/key")
}
