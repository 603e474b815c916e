package localstore

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

func TestRecentDropsLeastRecentlyUsedPastItsBudget(t *testing.T) {
	r := newRecent(3 * entrySize("k0", []byte("v0")))
	r.put("k0", []byte("v0"))
	r.put("k1", []byte("v1"))
	r.put("k2", nil) // absent
	if v, ok := r.get("k0"); !ok || string(v) != "v0" {
		t.Fatalf("get(k0) = %q, %v; want v0, kept", v, ok)
	}
	r.put("k3", []byte("v3")) // over budget: k1, used least recently, goes
	if _, ok := r.get("k1"); ok {
		t.Error("k1 still kept past the budget; it was the least recently used")
	}
	for _, k := range []string{"k0", "k2", "k3"} {
		if _, ok := r.get(k); !ok {
			t.Errorf("%s dropped; only k1 should have been", k)
		}
	}
	if v, ok := r.get("k2"); !ok || v != nil {
		t.Errorf("get(k2) = %q, %v; want nil (absent), kept", v, ok)
	}
	if r.size > r.budget {
		t.Errorf("size %d over budget %d", r.size, r.budget)
	}
	r.put("k0", bytes.Repeat([]byte("x"), r.budget)) // an entry larger than the budget
	if _, ok := r.get("k0"); ok {
		t.Error("an entry larger than the budget was kept")
	}
	for _, k := range []string{"k2", "k3"} {
		r.remove(k)
	}
	if len(r.byKey) != 0 || r.size != 0 {
		t.Errorf("after removing every key: %d kept, size %d; want 0, 0", len(r.byKey), r.size)
	}
}

// Reads after the restore are served from what the store last read or
// wrote: a value LevelDB was changed under (directly, as nothing in the
// product does) still reads as the store knew it, until a write of the key
// is acknowledged. Overwrites and deletes are seen at once.
func TestReadsKeepWhatTheStoreLastReadOrWrote(t *testing.T) {
	f, st, s := restored(t, "a", "a0", "b", "b0")
	under := func(key, value string) { t.Helper(); putUnder(t, s, key, value) }

	if got := mustGet(t, st, "a"); got != "a0" {
		t.Fatalf("Get(a) = %s, want a0", got)
	}
	if got := mustGet(t, st, "x"); got != "<nil>" {
		t.Fatalf("Get(x) = %s, want nothing", got)
	}
	under("a", "changed underneath")
	under("x", "changed underneath")
	if got := mustGet(t, st, "a"); got != "a0" {
		t.Errorf("Get(a) = %s after a read, want a0 (kept)", got)
	}
	if got := mustGet(t, st, "x"); got != "<nil>" {
		t.Errorf("Get(x) = %s after a read found nothing, want nothing (kept)", got)
	}

	ea := f.set(t, st, "table", "a", "a1")
	if got := mustGet(t, st, "a"); got != "a1" {
		t.Errorf("Get(a) = %s with a1 unacknowledged, want a1", got)
	}
	f.fake.ack(ea, 0, 10)
	waitOffset(t, st, 10)
	under("a", "changed underneath again")
	if got := mustGet(t, st, "a"); got != "a1" {
		t.Errorf("Get(a) = %s after a1 was acknowledged, want a1 (the write kept)", got)
	}
	eb := f.del(t, st, "table", "b")
	f.fake.ack(eb, 0, 11)
	waitOffset(t, st, 11)
	if got := mustGet(t, st, "b"); got != "<nil>" {
		t.Errorf("Get(b) = %s after its delete was acknowledged, want nothing", got)
	}
}

// A read whose LevelDB Get raced with a callback's write keeps nothing:
// LevelDB may have had the value before the write, and the writer keeps the
// write's when it is acknowledged.
func TestReadRacingAWriteKeepsNothing(t *testing.T) {
	f, st, s := restored(t, "a", "a0", "b", "b0")

	_, found, gen, err := s.lookup("a")
	if err != nil || found {
		t.Fatalf("lookup(a) before any read: found %v, %v; want not found", found, err)
	}
	old, err := s.db.Get([]byte("a"), nil) // the read, then a write comes
	if err != nil {
		t.Fatal(err)
	}
	ea := f.set(t, st, "table", "a", "a1")
	f.fake.ack(ea, 0, 10)
	waitOffset(t, st, 10)
	s.remember("a", old, gen) // the read ends after the writer wrote a1
	if got := mustGet(t, st, "a"); got != "a1" {
		t.Errorf("Get(a) = %s after the racing read, want a1", got)
	}

	// Without a write in between the read is kept.
	_, _, gen, _ = s.lookup("b")
	s.remember("b", []byte("b0"), gen)
	if v, ok := s.recent.get("b"); !ok || string(v) != "b0" {
		t.Errorf("a read with no write since its lookup was not kept: %q, %v", v, ok)
	}
}

// A read that began during the restore keeps nothing: the restore may have
// written the key after it.
func TestReadDuringTheRestoreKeepsNothing(t *testing.T) {
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	st := f.open(t, "table", 0)
	defer mustClose(t, st)
	s := st.(*store)
	partial(t, st, 0, "a", "a0")
	_, found, gen, err := s.lookup("a")
	if err != nil || found {
		t.Fatalf("lookup(a) during the restore: found %v, %v; want not found", found, err)
	}
	old, err := s.db.Get([]byte("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	partial(t, st, 1, "a", "a1")
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	s.remember("a", old, gen) // the read ends after the restore wrote a1
	if got := mustGet(t, st, "a"); got != "a1" {
		t.Errorf("Get(a) = %s after a read that began during the restore, want a1", got)
	}
}

// The store keeps no more than its budget, however many keys are read.
func TestRecentStaysWithinItsBudget(t *testing.T) {
	defer func(b int) { recentBytes = b }(recentBytes)
	recentBytes = 100 * entrySize("key-000", []byte("value-000"))
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	st := f.open(t, "table", 0)
	defer mustClose(t, st)
	var kv []string
	for i := range 1000 {
		kv = append(kv, fmt.Sprintf("key-%03d", i), fmt.Sprintf("value-%03d", i))
	}
	restore(t, st, 0, kv...)
	for i := range 1000 {
		if got, want := mustGet(t, st, fmt.Sprintf("key-%03d", i)), fmt.Sprintf("value-%03d", i); got != want {
			t.Fatalf("Get = %s, want %s", got, want)
		}
	}
	s := st.(*store)
	if n := len(s.recent.byKey); n != 100 {
		t.Errorf("%d keys kept after 1,000 reads, want the budget's 100", n)
	}
	if _, ok := s.recent.get("key-999"); !ok {
		t.Error("the last key read is not kept")
	}
}
