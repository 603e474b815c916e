package localstore

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/clock"
)

// A store last caught up with its changelog longer ago than MaxOffline is
// wiped: tombstones written after its offset may have been compacted away
// since (delete.retention.ms), and reused it would bring deleted keys back.
// A clean close stamps the store as caught up; a store stamped within
// MaxOffline is reused.
func TestStoreOfflineTooLongIsWiped(t *testing.T) {
	dir := t.TempDir()
	var logs logBuffer
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	f := newFixture(t, dir, newLogger(&logs))
	f.stores.Clock, f.stores.MaxOffline = clk, 6*24*time.Hour
	f.changelogEnds("table", 0, 2)
	st := f.open(t, "table", 0)
	restore(t, st, 0, "gone", "1", "kept", "2")
	clk.Advance(5 * 24 * time.Hour) // idle, then closed: caught up now
	mustClose(t, st)

	clk.Advance(5 * 24 * time.Hour)
	st = f.open(t, "table", 0)
	if off := mustOffset(t, st); off != 1 {
		t.Fatalf("GetOffset = %d after 5 days offline, want 1 (reused)", off)
	}
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, st)

	clk.Advance(7 * 24 * time.Hour)
	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != -2 {
		t.Fatalf("GetOffset = %d after 7 days offline, want -2 (restore from the start)", off)
	}
	if got := mustGet(t, st, "gone"); got != "<nil>" {
		t.Errorf("Get(gone) = %s, want it wiped", got)
	}
	if l := logs.String(); !strings.Contains(l, "too long ago") {
		t.Errorf("no warning saying why:\n%s", l)
	}
}

// A restore cut off before the changelog's end (a crash, a revoke) leaves
// a store that holds its changelog whole only as of when it last did: the
// offsets it writes while restoring keep that time, so MaxOffline counts
// from it, and a store that began empty and never caught up is wiped when
// opened again. Stamped with the time of each write instead, a store that
// restored a little more three days later would be trusted a week after it
// last held its changelog whole, past tombstones compaction may have
// dropped.
func TestPartialRestoreKeepsItsCaughtUpTime(t *testing.T) {
	dir := t.TempDir()
	var logs logBuffer
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	f := newFixture(t, dir, newLogger(&logs))
	f.stores.Clock, f.stores.MaxOffline = clk, 6*24*time.Hour

	// Caught up at day 0, then a partial restore at day 3.
	f.changelogEnds("table", 0, 1)
	st := f.open(t, "table", 0)
	restore(t, st, 0, "a", "1")
	mustClose(t, st)
	clk.Advance(3 * 24 * time.Hour)
	f.changelogEnds("table", 0, 3)
	st = f.open(t, "table", 0)
	partial(t, st, 1, "b", "2", "c", "3")
	mustClose(t, st)
	clk.Advance(3*24*time.Hour + time.Hour) // 6 days and an hour after it last held its changelog whole
	st = f.open(t, "table", 0)
	if off := mustOffset(t, st); off != -2 {
		t.Fatalf("GetOffset = %d, want -2: the store last held its changelog whole over 6 days ago", off)
	}
	mustClose(t, st)

	// Began empty, cut off: wiped when opened again, even a minute later.
	f.changelogEnds("table", 1, 2)
	st = f.open(t, "table", 1)
	partial(t, st, 0, "x", "1", "y", "2")
	mustClose(t, st)
	clk.Advance(time.Minute)
	st = f.open(t, "table", 1)
	if off := mustOffset(t, st); off != -2 {
		t.Fatalf("GetOffset = %d, want -2: a store that began empty never held its changelog whole", off)
	}
	// Restored to the end this time: reused.
	restore(t, st, 0, "x", "1", "y", "2")
	mustClose(t, st)
	clk.Advance(24 * time.Hour)
	st = f.open(t, "table", 1)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != 1 {
		t.Fatalf("GetOffset = %d after a full restore, want 1 (reused)", off)
	}
}

// ClosedClean: a close with every write acknowledged reports the offset the
// store holds; a close with a write still waiting reports an unclean close,
// and so does a store never closed.
func TestClosedClean(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	st := f.open(t, "table", 0)
	restore(t, st, 0, "a", "a0")
	if _, ok := st.(*store).ClosedClean(); ok {
		t.Fatal("an open store reports a clean close")
	}
	e := f.set(t, st, "table", "a", "a1")
	f.fake.ack(e, 0, 7)
	waitOffset(t, st, 7)
	mustClose(t, st)
	if off, ok := st.(*store).ClosedClean(); !ok || off != 7 {
		t.Fatalf("ClosedClean = %d, %v after a close with everything acknowledged; want 7, true", off, ok)
	}

	st = f.open(t, "table", 0)
	f.set(t, st, "table", "b", "b1") // never acknowledged
	mustClose(t, st)
	if _, ok := st.(*store).ClosedClean(); ok {
		t.Fatal("a close that dropped a write reports a clean close")
	}
}
