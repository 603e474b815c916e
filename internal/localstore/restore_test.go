package localstore

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/lovoo/goka/storage"
	"github.com/syndtr/goleveldb/leveldb"
)

// rec is a changelog record: a tombstone if tomb.
type rec struct {
	key, value string
	tomb       bool
}

func val(key, value string) rec { return rec{key: key, value: value} }
func tomb(key string) rec       { return rec{key: key, tomb: true} }

// restoreRecs does what Goka's recovery does for each record (DefaultUpdate
// then SetOffset), from offset first on, without MarkRecovered.
func restoreRecs(t *testing.T, st storage.Storage, first int64, recs ...rec) {
	t.Helper()
	for i, r := range recs {
		var err error
		if r.tomb {
			err = st.Delete(r.key)
		} else {
			err = st.Set(r.key, []byte(r.value))
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SetOffset(first + int64(i)); err != nil {
			t.Fatal(err)
		}
	}
}

func markRecovered(t *testing.T, st storage.Storage) {
	t.Helper()
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
}

// dbStats are the LevelDB statistics of st.
func dbStats(t *testing.T, st storage.Storage) *leveldb.DBStats {
	t.Helper()
	var stats leveldb.DBStats
	if err := st.(*store).db.Stats(&stats); err != nil {
		t.Fatal(err)
	}
	return &stats
}

func ioWritten(t *testing.T, st storage.Storage) uint64 {
	t.Helper()
	return dbStats(t, st).IOWrite
}

// A restore into an empty store does not write the tombstones of keys it
// never wrote (a compacted changelog after users were removed is mostly
// such tombstones): they delete nothing, and LevelDB gets (nearly) nothing
// for them. Tombstones of keys it wrote still delete them.
func TestRestoreIntoEmptySkipsTombstonesOfUnwrittenKeys(t *testing.T) {
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	st := f.open(t, "table", 0)
	recs := []rec{val("user-1", "v1"), val("user-2", "v2")}
	const gone = 5000
	for i := range gone {
		recs = append(recs, tomb(fmt.Sprint("idle-", i)))
	}
	recs = append(recs, tomb("user-1"))
	before := ioWritten(t, st)
	restoreRecs(t, st, 0, recs...)
	markRecovered(t, st)
	last := int64(len(recs) - 1)

	s := st.(*store)
	if s.skipped != gone {
		t.Errorf("skipped %d tombstones, want %d (those of the keys never written)", s.skipped, gone)
	}
	// 5,000 deletes would take about 80 KB of LevelDB's journal; the
	// offset alone, written every restoreOffsetEvery records, a few
	// hundred bytes.
	if w := ioWritten(t, st) - before; w > 2000 {
		t.Errorf("the restore wrote %d bytes to LevelDB, want under 2000: tombstones of keys never written reached it", w)
	}
	if got := f.stores.Restored(); got != int64(len(recs)) {
		t.Errorf("Restored() = %d, want %d (skipped tombstones count as restored)", got, len(recs))
	}
	if got := mustGet(t, st, "user-1"); got != "<nil>" {
		t.Errorf("user-1 = %s after its tombstone, want deleted", got)
	}
	mustClose(t, st)

	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != last {
		t.Errorf("GetOffset = %d after reopen, want %d (the last tombstone's)", off, last)
	}
	markRecovered(t, st)
	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(t, it), []string{"user-2=v2"}; !slices.Equal(got, want) {
		t.Errorf("iterated %v, want %v", got, want)
	}
}

// A tombstone deletes a key the restore wrote, whether the value is still
// in the batch or already in LevelDB, and whatever other keys were written
// (the filter grows past its first part).
func TestRestoreTombstonesDeleteWrittenKeys(t *testing.T) {
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	st := f.open(t, "table", 0)
	var recs []rec
	const n = bloomFirstSize + 1000
	for i := range n {
		recs = append(recs, val(fmt.Sprint("k", i), "v"))
	}
	for i := 0; i < n; i += 7 {
		recs = append(recs, tomb(fmt.Sprint("k", i)))
	}
	restoreRecs(t, st, 0, recs...)
	markRecovered(t, st)
	mustClose(t, st)

	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	markRecovered(t, st)
	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, kv := range keys(t, it) {
		got[kv] = true
	}
	for i := range n {
		if want := i%7 != 0; got[fmt.Sprint("k", i, "=v")] != want {
			t.Fatalf("k%d present %v, want %v", i, !want, want)
		}
	}
}

// A store reused after a restart holds keys from before: its restore (the
// changelog's tail) applies every tombstone.
func TestRestoreIntoReusedStoreAppliesTombstones(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	st := f.open(t, "table", 0)
	restoreRecs(t, st, 0, val("a", "1"), val("b", "2"))
	markRecovered(t, st)
	mustClose(t, st)

	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	restoreRecs(t, st, 2, tomb("a"), tomb("never"))
	markRecovered(t, st)
	if got := mustGet(t, st, "a"); got != "<nil>" {
		t.Errorf("a = %s after its tombstone in a reused store, want deleted", got)
	}
	if s := st.(*store); s.skipped != 0 {
		t.Errorf("a reused store skipped %d tombstones, want 0", s.skipped)
	}
}

// A restore whose last records are skipped tombstones still stores the
// offset it reached, during the restore too (a crash then restores only
// the rest).
func TestRestoreOfTombstonesStoresTheirOffset(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	st := f.open(t, "table", 0)
	var recs []rec
	for i := range restoreOffsetEvery + 10 {
		recs = append(recs, tomb(fmt.Sprint("idle-", i)))
	}
	restoreRecs(t, st, 100, recs...)
	s := st.(*store)
	off, _, _, found, err := readOffset(s.db)
	if err != nil || !found || off < 100+restoreOffsetEvery-2 {
		t.Errorf("LevelDB offset %d (found %v, %v) during a restore of %d tombstones, want at least %d",
			off, found, err, len(recs), 100+restoreOffsetEvery-2)
	}
	markRecovered(t, st)
	mustClose(t, st)
	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	if off, want := mustOffset(t, st), int64(100+len(recs)-1); off != want {
		t.Errorf("GetOffset = %d after reopen, want %d", off, want)
	}
}

// With marks: a skipped tombstone leaves no mark behind, a tombstone of a
// marked key written by the restore takes its mark away.
func TestRestoreTombstonesAndMarks(t *testing.T) {
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	f.stores.Mark(func(v []byte) bool { return bytes.HasPrefix(v, []byte("m")) })
	f.build = f.stores.Builder()
	st := f.open(t, "table", 0)
	defer mustClose(t, st)
	restoreRecs(t, st, 0, val("a", "m1"), val("b", "m2"), tomb("x"), tomb("a"))
	markRecovered(t, st)
	if got := marked(t, st); !slices.Equal(got, []string{"b"}) {
		t.Errorf("marked %v, want [b]", got)
	}
}

// The restored records and the offset Goka reached survive a close, and a
// second close does nothing.
func TestRestoreSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	var logs logBuffer
	f := newFixture(t, dir, newLogger(&logs))
	st := f.open(t, "table", 3)
	if off := mustOffset(t, st); off != -2 {
		t.Fatalf("new store: GetOffset(-2) = %d, want -2 (restore from the start)", off)
	}
	restore(t, st, 40, "a", "1", "b", "2", "c", "3")
	if n := f.stores.Restored(); n != 3 {
		t.Errorf("Restored() = %d after restoring 3 records, want 3", n)
	}
	mustClose(t, st)
	mustClose(t, st)

	st = f.open(t, "table", 3)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != 42 {
		t.Errorf("GetOffset = %d after reopen, want 42", off)
	}
	if err := st.MarkRecovered(); err != nil { // Goka: nothing left to restore
		t.Fatal(err)
	}
	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(t, it), []string{"a=1", "b=2", "c=3"}; !slices.Equal(got, want) {
		t.Errorf("iterated %v, want %v (without the offset key)", got, want)
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("clean cycle logged a warning:\n%s", logs.String())
	}
}

// Restored records are written restoreBatch at a time with the offset
// reached, and reads during the restore see them.
func TestRestoredWritesAreBatchedAndSeen(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	st := f.open(t, "table", 0)
	n := restoreBatch + 10
	for i := range n {
		if err := st.Set(fmt.Sprint("k", i), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if err := st.SetOffset(int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	s := st.(*store)
	if got := s.batch.Len(); got != 10 {
		t.Errorf("batch holds %d records after %d, want 10 (one batch written)", got, n)
	}
	off, _, _, _, err := readOffset(s.db)
	if err != nil || off != restoreBatch-2 {
		t.Errorf("LevelDB offset %d, %v after the first batch; want %d (at most the records written)", off, err, restoreBatch-2)
	}
	if got := mustGet(t, st, fmt.Sprint("k", n-1)); got != fmt.Sprint(n-1) {
		t.Errorf("read during restore: %s", got)
	}
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, st)
	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != int64(n-1) {
		t.Errorf("GetOffset = %d, want %d", off, n-1)
	}
}
