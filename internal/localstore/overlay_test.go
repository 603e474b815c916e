package localstore

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// A callback's write is read back at once but reaches LevelDB only with its
// acknowledgement, with the offset the changelog gave it.
func TestWritesReachDiskWhenAcknowledged(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	st := f.open(t, "table", 0)
	restore(t, st, 0, "a", "a0", "b", "b0", "c", "c0")

	ea := f.set(t, st, "table", "a", "a1")
	eb := f.set(t, st, "table", "b", "b1")
	ec := f.del(t, st, "table", "c")
	f.set(t, st, "table", "d", "d1") // never acknowledged
	for k, want := range map[string]string{"a": "a1", "b": "b1", "c": "<nil>", "d": "d1"} {
		if got := mustGet(t, st, k); got != want {
			t.Errorf("Get(%s) = %s before any acknowledgement, want %s", k, got, want)
		}
	}
	if ok, err := st.Has("c"); err != nil || ok {
		t.Errorf("Has(c) = %v, %v after its delete; want false", ok, err)
	}
	f.fake.ack(ea, 0, 10)
	f.fake.ack(eb, 0, 11)
	f.fake.ack(ec, 0, 12)
	waitOffset(t, st, 12)
	if got := mustGet(t, st, "a"); got != "a1" {
		t.Errorf("Get(a) = %s after its acknowledgement, want a1", got)
	}
	mustClose(t, st)

	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != 12 {
		t.Errorf("GetOffset = %d, want 12 (the last acknowledged write)", off)
	}
	for k, want := range map[string]string{"a": "a1", "b": "b1", "c": "<nil>", "d": "<nil>"} {
		if got := mustGet(t, st, k); got != want {
			t.Errorf("after reopen Get(%s) = %s, want %s", k, got, want)
		}
	}
}

// Two writes of a key in flight: the first acknowledgement writes the first
// value to disk, reads still see the second.
func TestSameKeyInFlightTwice(t *testing.T) {
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	st := f.open(t, "table", 0)
	defer mustClose(t, st)
	restore(t, st, 0)
	e1 := f.set(t, st, "table", "k", "v1")
	e2 := f.set(t, st, "table", "k", "v2")
	f.fake.ack(e1, 0, 5)
	waitOffset(t, st, 5)
	if got := mustGet(t, st, "k"); got != "v2" {
		t.Fatalf("Get(k) = %s with v2 unacknowledged, want v2", got)
	}
	if v, err := st.(*store).db.Get([]byte("k"), nil); err != nil || string(v) != "v1" {
		t.Fatalf("LevelDB holds %q, %v; want v1 (what the changelog has)", v, err)
	}
	f.fake.ack(e2, 0, 6)
	waitOffset(t, st, 6)
	if n := len(st.(*store).overlay); n != 0 {
		t.Errorf("overlay holds %d keys after every write was acknowledged, want 0", n)
	}
	if got := mustGet(t, st, "k"); got != "v2" {
		t.Errorf("Get(k) = %s, want v2", got)
	}
}

// Acknowledgements go to the store open when the write was emitted: not to
// a store of another topic or partition, not to a later store of the same
// partition, not to a closed one.
func TestAcknowledgementsReachTheirStore(t *testing.T) {
	dir := t.TempDir()
	var logs logBuffer
	f := newFixture(t, dir, newLogger(&logs))
	p0 := f.open(t, "table", 0)
	p1 := f.open(t, "table", 1)
	restore(t, p0, 0)
	restore(t, p1, 0)

	e0 := f.set(t, p0, "table", "k0", "v0")
	e1 := f.set(t, p1, "table", "k1", "v1")
	other := len(f.fake.emits)
	f.prod.Emit("calls", "k0", []byte("not a table write"))
	f.fake.ack(other, 0, 99)
	f.fake.ack(e1, 1, 7)
	f.fake.ack(e0, 0, 3)
	waitOffset(t, p0, 3)
	waitOffset(t, p1, 7)
	if off := mustOffset(t, p0); off != 3 {
		t.Errorf("partition 0 offset %d, want 3 (the calls topic's ack must not count)", off)
	}

	late := f.set(t, p0, "table", "k0", "late")
	mustClose(t, p0)
	p0 = f.open(t, "table", 0)
	defer mustClose(t, p0)
	if err := p0.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	f.fake.ack(late, 0, 4) // emitted by the store closed since
	if got := mustGet(t, p0, "k0"); got != "v0" {
		t.Errorf("Get(k0) = %s: the new store took the old one's acknowledgement", got)
	}
	mustClose(t, p1)
	f.fake.ack(len(f.fake.emits)-1, 1, 8) // nothing open: ignored
	if strings.Contains(logs.String(), "did not make") {
		t.Errorf("an acknowledgement reached the wrong store:\n%s", logs.String())
	}
}

// A failed changelog write never reaches the disk; the read still sees it
// until the store closes (the processor fails on the error).
func TestFailedWriteStaysOffDisk(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	st := f.open(t, "table", 0)
	restore(t, st, 0, "k", "old")
	f.fake.fail(f.set(t, st, "table", "k", "new"))
	mustClose(t, st)
	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	if got := mustGet(t, st, "k"); got != "old" {
		t.Errorf("Get(k) = %s after a failed changelog write, want old", got)
	}
}

func TestUnwrappedProducerIsReported(t *testing.T) {
	defer func(n int) { maxUnacked = n }(maxUnacked)
	maxUnacked = 3
	st := newFixture(t, t.TempDir(), newLogger(io.Discard)).open(t, "table", 0)
	defer mustClose(t, st)
	restore(t, st, 0)
	var err error
	for i := 0; i < 4 && err == nil; i++ {
		err = st.Set(fmt.Sprint("k", i), []byte("v"))
	}
	if err == nil || !strings.Contains(err.Error(), "Stores.Producer") {
		t.Fatalf("4 writes never acknowledged, limit 3: err %v, want one naming Stores.Producer", err)
	}
}

// The iterator shows LevelDB with the overlay over it, in key order,
// within the range asked for.
func TestIteratorMergesOverlay(t *testing.T) {
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	st := f.open(t, "table", 0)
	defer mustClose(t, st)
	restore(t, st, 0, "b", "b0", "d", "d0", "f", "f0", "h", "h0")
	f.set(t, st, "table", "a", "a1") // before all
	f.set(t, st, "table", "d", "d1") // replaces
	f.del(t, st, "table", "f")       // hides
	f.set(t, st, "table", "g", "g1") // between
	f.del(t, st, "table", "x")       // deletes nothing
	f.set(t, st, "table", "z", "z1") // after all

	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a=a1", "b=b0", "d=d1", "g=g1", "h=h0", "z=z1"}
	if got := keys(t, it); !slices.Equal(got, want) {
		t.Errorf("iterated %v, want %v", got, want)
	}
	it, err = st.IteratorWithRange([]byte("b"), []byte("h"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(t, it), []string{"b=b0", "d=d1", "g=g1"}; !slices.Equal(got, want) {
		t.Errorf("range [b, h): %v, want %v", got, want)
	}
	it, err = st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	if !it.Seek([]byte("e")) {
		t.Fatal("Seek(e) found nothing")
	}
	if got, want := keys(t, it), []string{"g=g1", "h=h0", "z=z1"}; !slices.Equal(got, want) {
		t.Errorf("after Seek(e): %v, want %v", got, want)
	}
}
