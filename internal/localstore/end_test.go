package localstore

import (
	"io"
	"testing"
	"time"

	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/internal/clock"
)

// openOn opens the partition 0 store of the rig's topic in s.
func openOn(t *testing.T, s *Stores, topic string) storage.Storage {
	t.Helper()
	st, err := s.Builder()(topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	return st
}

// Goka ends a restore cut off by a revoke (its context ends) as if it had
// finished: PartitionTable.load gets nil from loadMessages, then calls
// markRecovered, which runs the storage's MarkRecovered in a goroutine
// and returns at once on the ended context (goka 1.1.16,
// partition_table.go). A store that began empty and restored only the
// changelog's head must not take that for the end of its restore: opened
// again, it is wiped, or the tombstones of the tail it never restored,
// dropped by the log cleaner meanwhile, would bring erased users back. A
// restore that reached the changelog's end is trusted as before.
func TestRestoreCutOffIsNotTrusted(t *testing.T) {
	r := newChangelogRig(t)
	r.write(t, val("a", "1"), val("b", "2"), tomb("a"), val("c", "3"))
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	r.direct.Clock, r.direct.MaxOffline = clk, 6*24*time.Hour

	st := openOn(t, r.direct, r.topic)
	partial(t, st, 0, "a", "1", "b", "2") // the revoke comes before tomb(a)
	err := st.MarkRecovered()             // Goka's, after the cut
	mustClose(t, st)
	if err == nil {
		t.Errorf("MarkRecovered at offset 1 of a changelog ending at 3: no error")
	}
	clk.Advance(time.Minute)
	st = openOn(t, r.direct, r.topic)
	if off := mustOffset(t, st); off != -2 {
		t.Fatalf("GetOffset = %d after a restore cut off at offset 1 of 3, want -2 (wiped, restored from the start)", off)
	}
	restoreRecs(t, st, 0, val("a", "1"), val("b", "2"), tomb("a"), val("c", "3"))
	markRecovered(t, st)
	mustClose(t, st)
	clk.Advance(time.Minute)
	st = openOn(t, r.direct, r.topic)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != 3 {
		t.Fatalf("GetOffset = %d after a restore to the changelog's end, want 3 (reused)", off)
	}
}

// Goka's MarkRecovered after a cut-off restore may come after Close (it
// runs in a goroutine nothing waits for): it then does nothing, and the
// store closed mid-restore stays as Close left it.
func TestMarkRecoveredAfterCloseDoesNothing(t *testing.T) {
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	f.changelogEnds("table", 0, 1)
	st := f.open(t, "table", 0)
	partial(t, st, 0, "a", "1")
	mustClose(t, st)
	if err := st.MarkRecovered(); err != nil {
		t.Errorf("MarkRecovered after Close: %v, want nothing done", err)
	}
	if st.(*store).recovered.Load() {
		t.Error("a store closed mid-restore is marked recovered by a MarkRecovered after Close")
	}
}
