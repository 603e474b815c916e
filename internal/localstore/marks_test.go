package localstore

import (
	"bytes"
	"io"
	"slices"
	"testing"
)

// Marks follow the values through the restore, the overlay, the
// acknowledged writes and a reopen without a clean close; iterators skip
// them.
func TestMarksFollowValues(t *testing.T) {
	dir := t.TempDir()
	newMarked := func() *fixture {
		f := newFixture(t, dir, newLogger(io.Discard))
		f.stores.Mark(func(v []byte) bool { return bytes.HasPrefix(v, []byte("m")) })
		f.build = f.stores.Builder()
		return f
	}
	f := newMarked()
	st := f.open(t, "table", 0)
	restore(t, st, 0, "a", "m1", "b", "x", "c", "m1", "c", "x", "d", "m2")
	if got := marked(t, st); !slices.Equal(got, []string{"a", "d"}) {
		t.Fatalf("after restore: marked %v, want [a d]", got)
	}
	ea := f.set(t, st, "table", "a", "x")  // unmarked
	eb := f.set(t, st, "table", "b", "m3") // marked
	f.set(t, st, "table", "e", "m4")       // marked, never acknowledged
	ed := f.del(t, st, "table", "d")
	if got := marked(t, st); !slices.Equal(got, []string{"b", "e"}) {
		t.Fatalf("with the overlay: marked %v, want [b e]", got)
	}
	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(t, it), []string{"a=x", "b=m3", "c=x", "e=m4"}; !slices.Equal(got, want) {
		t.Fatalf("iterated %v, want %v (no marks)", got, want)
	}
	f.fake.ack(ea, 0, 10)
	f.fake.ack(eb, 0, 11)
	f.fake.ack(ed, 0, 12)
	waitOffset(t, st, 12)
	if got := marked(t, st); !slices.Equal(got, []string{"b", "e"}) {
		t.Fatalf("after the acknowledgements: marked %v", got)
	}
	// A crash (no Close): only what was acknowledged is on disk, marks included.
	st.(*store).db.Close()
	st.(*store).files.Close()
	st = newMarked().open(t, "table", 0)
	defer mustClose(t, st)
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	if got := marked(t, st); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after reopening: marked %v, want [b]", got)
	}
	it, err = st.IteratorWithRange([]byte("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(t, it), []string{"a=x", "b=m3", "c=x"}; !slices.Equal(got, want) {
		t.Fatalf("iterated %v, want %v", got, want)
	}
	plain := newFixture(t, t.TempDir(), newLogger(io.Discard)).open(t, "table", 1)
	defer mustClose(t, plain)
	if _, err := plain.(*store).Marked(); err == nil {
		t.Fatal("Marked on stores that keep no marks: no error")
	}
}
