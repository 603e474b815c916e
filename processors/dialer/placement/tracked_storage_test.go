package placement

import (
	"testing"

	"github.com/lovoo/goka/storage"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
)

// openInFlight opens partition part of the table, restored with one user
// whose value lists a call in flight, without MarkRecovered.
func openInFlight(t *testing.T, build storage.Builder, part int32) storage.Storage {
	t.Helper()
	st, err := build(table, part)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	if err := st.Set("u", enc(t, &pb.DialerState{InFlight: []*pb.IVRCall{call("u", "c1")}})); err != nil {
		t.Fatal(err)
	}
	return st
}

// When a revoke cuts Goka's restore off, Goka runs MarkRecovered in a
// goroutine nothing waits for and closes the partition meanwhile. A
// partition closed while its MarkRecovered runs is not owned once it
// returns: no share of --cps, and the calls its values list in flight are
// not placed here (the partition's next owner places them).
func TestMarkRecoveredRacingCloseOwnsNothing(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 4, CPS: 8, Partitions: 4})
	inner := kafkatest.NewHeldRecovery(storage.NewMemory())
	st := openInFlight(t, f.p.StorageBuilder(func(string, int32) (storage.Storage, error) { return inner, nil }), 0)
	if err := inner.CloseDuringMarkRecovered(t, st); err != nil {
		t.Logf("MarkRecovered after Close: %v", err)
	}
	idle(f.p)
	if r := f.p.Rate(); r != 0 {
		t.Errorf("rate %v after the partition was closed, want 0 (no partition owned)", r)
	}
	if seen := f.prov.Seen(); len(seen) != 0 {
		t.Errorf("placed %v for a partition closed before its MarkRecovered returned", seen)
	}
}

// A MarkRecovered that comes after Close does nothing.
func TestMarkRecoveredAfterCloseOwnsNothing(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 4, CPS: 8, Partitions: 4})
	st := openInFlight(t, f.build, 1)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	idle(f.p)
	if r := f.p.Rate(); r != 0 {
		t.Errorf("rate %v after a MarkRecovered after Close, want 0", r)
	}
	if seen := f.prov.Seen(); len(seen) != 0 {
		t.Errorf("placed %v for a partition already closed", seen)
	}
}
