package localstore

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka/storage"
)

// tokens indexes a value "x,y" as the entries prefix+"x/"+key and
// prefix+"y/"+key, meta the token.
func tokens(prefix string) Indexer {
	return func(key string, value []byte, put func(sub, meta []byte)) {
		for _, tok := range strings.Split(string(value), ",") {
			if tok != "" {
				put([]byte(prefix+tok+"/"+key), []byte(tok))
			}
		}
	}
}

// entriesOf lists the entries IndexRange reads in [from, to), as
// "sub=key:meta".
func entriesOf(t *testing.T, st storage.Storage, from, to string) []string {
	t.Helper()
	var f, l []byte
	if from != "" {
		f = []byte(from)
	}
	if to != "" {
		l = []byte(to)
	}
	var out []string
	err := st.(*store).IndexRange(f, l, func(sub []byte, key string, meta []byte) bool {
		out = append(out, string(sub)+"="+key+":"+string(meta))
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The secondary index follows the values through the restore (a key set
// twice in one batch, a tombstone), the overlay (not acknowledged: its
// value's entries replace LevelDB's), the acknowledged writes and a kill;
// iterators and the key filter's scan skip it.
func TestIndexFollowsValues(t *testing.T) {
	dir := t.TempDir()
	newIndexed := func(version string, ix Indexer) *fixture {
		f := newFixture(t, dir, newLogger(io.Discard))
		if ix != nil {
			f.stores.Index(version, ix)
		}
		f.build = f.stores.Builder()
		return f
	}
	f := newIndexed("1", tokens(""))
	st := f.open(t, "table", 0)
	partial(t, st, 0, "a", "x,y", "b", "y", "a", "z", "c", "w")
	if err := st.Delete("c"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetOffset(4); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	if got, want := entriesOf(t, st, "", ""), []string{"y/b=b:y", "z/a=a:z"}; !slices.Equal(got, want) {
		t.Fatalf("after the restore: %v, want %v", got, want)
	}
	eb := f.set(t, st, "table", "b", "q")
	ea := f.del(t, st, "table", "a")
	f.set(t, st, "table", "d", "y,r") // never acknowledged
	want := []string{"q/b=b:q", "r/d=d:r", "y/d=d:y"}
	if got := entriesOf(t, st, "", ""); !slices.Equal(got, want) {
		t.Fatalf("with the overlay: %v, want %v", got, want)
	}
	if got := entriesOf(t, st, "r", "y0"); !slices.Equal(got, want[1:]) {
		t.Fatalf("[r, y0) with the overlay: %v, want %v", got, want[1:])
	}
	f.fake.ack(eb, 0, 5)
	f.fake.ack(ea, 0, 6)
	waitOffset(t, st, 6)
	if got := entriesOf(t, st, "", ""); !slices.Equal(got, want) {
		t.Fatalf("after the acknowledgements: %v, want %v", got, want)
	}
	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(t, it), []string{"b=q", "d=y,r"}; !slices.Equal(got, want) {
		t.Fatalf("iterated %v, want %v (no index entries)", got, want)
	}
	// A kill: LevelDB holds the acknowledged values and their entries.
	st.(*store).db.Close()
	st.(*store).files.Close()
	st = newIndexed("1", tokens("")).open(t, "table", 0)
	restore(t, st, 7, "e", "y")
	if got, want := entriesOf(t, st, "", ""), []string{"q/b=b:q", "y/e=e:y"}; !slices.Equal(got, want) {
		t.Fatalf("after the kill and a restored tail: %v, want %v", got, want)
	}
	s := st.(*store)
	s.mu.Lock()
	scanned := s.scanned // the reused store's scan of its keys, started by MarkRecovered
	s.mu.Unlock()
	<-scanned
	s.mu.Lock()
	built := s.keysBuilt
	s.mu.Unlock()
	if built != 2 {
		t.Fatalf("the key filter was built of %d keys, want 2 (b, e: no index entries)", built)
	}
	mustClose(t, st)

	// Another version rebuilds the index from the values at open.
	var logs logBuffer
	f = newFixture(t, dir, newLogger(&logs))
	f.stores.Index("2", tokens("2"))
	f.build = f.stores.Builder()
	st = f.open(t, "table", 0)
	if got, want := entriesOf(t, st, "", ""), []string{"2q/b=b:q", "2y/e=e:y"}; !slices.Equal(got, want) {
		t.Fatalf("after a version change: %v, want %v", got, want)
	}
	if !strings.Contains(logs.String(), "rebuilding") {
		t.Errorf("no rebuild logged:\n%s", logs.String())
	}
	mustClose(t, st)

	// Stores without an index drop the version: the next open with one
	// rebuilds (the index was not kept meanwhile).
	f = newIndexed("", nil)
	st = f.open(t, "table", 0)
	restore(t, st, 8, "b", "s")
	mustClose(t, st)
	st = newIndexed("2", tokens("2")).open(t, "table", 0)
	defer mustClose(t, st)
	if got, want := entriesOf(t, st, "", ""), []string{"2s/b=b:s", "2y/e=e:y"}; !slices.Equal(got, want) {
		t.Fatalf("after an open without the index: %v, want %v", got, want)
	}
}

// A store written before the index existed is rebuilt once, and an empty
// store opens stamped (no rebuild of nothing); IndexRange on stores that
// keep no index fails.
func TestIndexUpgrade(t *testing.T) {
	dir := t.TempDir()
	plain := newFixture(t, dir, newLogger(io.Discard))
	st := plain.open(t, "table", 0)
	restore(t, st, 0, "a", "x", "b", "y,z")
	if err := st.(*store).IndexRange(nil, nil, func([]byte, string, []byte) bool { return true }); err == nil {
		t.Error("IndexRange on stores that keep no index: no error")
	}
	mustClose(t, st)
	var logs logBuffer
	f := newFixture(t, dir, newLogger(&logs))
	f.stores.Index("1", tokens(""))
	f.build = f.stores.Builder()
	st = f.open(t, "table", 0)
	if got, want := entriesOf(t, st, "", ""), []string{"x/a=a:x", "y/b=b:y", "z/b=b:z"}; !slices.Equal(got, want) {
		t.Fatalf("after the upgrade: %v, want %v", got, want)
	}
	if n := strings.Count(logs.String(), "rebuilding"); n != 1 {
		t.Errorf("%d rebuilds logged, want 1:\n%s", n, logs.String())
	}
	mustClose(t, st)
	st = f.open(t, "table", 0)
	if n := strings.Count(logs.String(), "rebuilding"); n != 1 {
		t.Errorf("the second open rebuilt again:\n%s", logs.String())
	}
	if got := mustOffset(t, st); got != 1 {
		t.Errorf("offset %d after the rebuild, want 1 (the store kept)", got)
	}
	mustClose(t, st)

	empty := newFixture(t, t.TempDir(), newLogger(&logs))
	empty.stores.Index("1", tokens(""))
	empty.build = empty.stores.Builder()
	st = empty.open(t, "table", 1)
	mustClose(t, st)
	st = empty.open(t, "table", 1)
	defer mustClose(t, st)
	if n := strings.Count(logs.String(), "rebuilding"); n != 1 {
		t.Errorf("an empty store rebuilt its index:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "older version") {
		t.Errorf("an empty store with its stamp was taken for an older version's:\n%s", logs.String())
	}
}

// Close waits for a read of the index under way (LevelDB must not close
// under its iterator); a read after Close fails.
func TestIndexReadHoldsClose(t *testing.T) {
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	f.stores.Index("1", tokens(""))
	f.build = f.stores.Builder()
	st := f.open(t, "table", 0)
	restore(t, st, 0, "a", "x", "b", "y")
	inRead, release, readDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		first := true
		readDone <- st.(*store).IndexRange(nil, nil, func([]byte, string, []byte) bool {
			if first {
				first = false
				close(inRead)
				<-release
			}
			return true
		})
	}()
	<-inRead
	closed := make(chan error, 1)
	go func() { closed <- st.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) during a read of the index", err)
	case <-time.After(100 * time.Millisecond): // a Close that did not wait returns at once
	}
	close(release)
	if err := <-readDone; err != nil {
		t.Fatalf("the read under way: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := st.(*store).IndexRange(nil, nil, func([]byte, string, []byte) bool { return true }); err == nil {
		t.Fatal("IndexRange after Close: no error")
	}
}

// Level 1 holds 10 MiB: with keys written in random order each compaction
// of level 0 rewrites all of level 1 (store.go, levelOptions).
func TestLevelOneHoldsTenMiB(t *testing.T) {
	if got := levelOptions.GetCompactionTotalSize(1); got != 10<<20 {
		t.Fatalf("level 1 holds %d bytes, want %d", got, 10<<20)
	}
}

// The writer takes a key's old value from what the store last read or
// wrote of it (a callback reads a user's value before it writes it; a new
// key's read finds it absent in the key filter), and reads LevelDB only for
// a key it does not know: the entries of the old value go all the same.
func TestWriterTakesOldValuesItKnows(t *testing.T) {
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	f.stores.Index("1", tokens(""))
	f.build = f.stores.Builder()
	st := f.open(t, "table", 0)
	defer mustClose(t, st)
	restore(t, st, 0, "a", "x", "b", "w")
	s := st.(*store)
	base := s.oldReads.Load()

	if got := mustGet(t, st, "a"); got != "x" { // read from LevelDB, kept
		t.Fatalf("Get(a) = %s, want x", got)
	}
	if got := mustGet(t, st, "n"); got != "<nil>" { // absent by the key filter
		t.Fatalf("Get(n) = %s, want nothing", got)
	}
	// write sets key to value and waits until the writer wrote it at offset.
	write := func(key, value string, offset int64) {
		t.Helper()
		f.fake.ack(f.set(t, st, "table", key, value), 0, offset)
		waitOffset(t, st, offset)
	}
	write("a", "y", 10)
	write("n", "z", 11)
	if got := s.oldReads.Load() - base; got != 0 {
		t.Errorf("the writer read %d old values from LevelDB for keys just read, want 0", got)
	}
	if got, want := entriesOf(t, st, "", ""), []string{"w/b=b:w", "y/a=a:y", "z/n=n:z"}; !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v (a's x gone)", got, want)
	}

	// Written twice without a read in between: known from the first write.
	write("a", "v", 12)
	// b was never read since the restore: its old value comes from LevelDB.
	write("b", "u", 13)
	if got := s.oldReads.Load() - base; got != 1 {
		t.Errorf("the writer read %d old values from LevelDB, want 1 (b's)", got)
	}
	if got, want := entriesOf(t, st, "", ""), []string{"u/b=b:u", "v/a=a:v", "z/n=n:z"}; !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
}
