package localstore

import (
	"context"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
	"github.com/twmb/franz-go/pkg/kmsg"

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

// recreate deletes the rig's topic and creates it again (compacted, one
// partition), holding recs.
func (r *changelogRig) recreate(t *testing.T, recs ...rec) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(r.k.Brokers, r.k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteTopic(r.topic); err != nil {
		t.Fatal(err)
	}
	compact := "compact"
	if err := admin.CreateTopic(r.topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"cleanup.policy": &compact}}, false); err != nil {
		t.Fatal(err)
	}
	r.offset = 0
	r.write(t, recs...)
}

// A changelog recreated (disaster recovery) or truncated (an unclean
// leader election) leaves a store that does not match it. Reused, its old
// users' follow-ups would fire, the new records before its offset would
// never be restored, and on an empty new changelog Goka would fail at
// every start. A store whose offset is at or past the changelog's
// high-water mark, or whose changelog's topic ID differs from the one it
// recorded, is wiped and restored: after a Goka restore it holds the new
// changelog's records only.
func TestRecreatedChangelogIsRestoredFromScratch(t *testing.T) {
	r := newChangelogRig(t)
	r.write(t, val("old-a", "1"), val("old-b", "2"), val("old-c", "3"))
	r.restoreInto(t, r.direct)

	// Fewer records than the store had: its offset is past the end.
	r.recreate(t, val("new", "1"))
	r.restoreInto(t, r.direct)
	if d := dumpStores(t, r.direct, r.topic); d.offset != 0 || !slices.Equal(d.kvs, []string{"new=1"}) {
		t.Errorf("after the changelog was recreated with one record: offset %d, %v; want 0, [new=1]", d.offset, d.kvs)
	}

	// More records than the store had: only the topic ID tells.
	r.recreate(t, val("x", "1"), val("y", "2"), val("z", "3"))
	r.restoreInto(t, r.direct)
	if d := dumpStores(t, r.direct, r.topic); d.offset != 2 || !slices.Equal(d.kvs, []string{"x=1", "y=2", "z=3"}) {
		t.Errorf("after the changelog was recreated with three records: offset %d, %v; want 2, [x=1 y=2 z=3]", d.offset, d.kvs)
	}

	// Empty: Goka restores it (it failed on the store's offset).
	r.recreate(t)
	r.restoreInto(t, r.direct)
	if d := dumpStores(t, r.direct, r.topic); d.offset != -2 || len(d.kvs) != 0 {
		t.Errorf("after the changelog was recreated empty: offset %d, %v; want -2 (none), nothing", d.offset, d.kvs)
	}
}

// markOrdered wraps a store so that Close comes after Goka's MarkRecovered
// (the order in which Goka's MarkRecovered after a cut once stamped the
// store): called is closed with the MarkRecovered's error in err. Close
// waits for it at most orderBound (a Goka that no longer calls it fails
// the test instead of hanging it).
type markOrdered struct {
	storage.Storage
	called chan struct{}
	err    error
}

const orderBound = 10 * time.Second

func (m *markOrdered) MarkRecovered() error {
	m.err = m.Storage.MarkRecovered()
	close(m.called)
	return m.err
}

func (m *markOrdered) Close() error {
	select {
	case <-m.called:
	case <-time.After(orderBound):
	}
	return m.Storage.Close()
}

// The same cut-off through Goka 1.1.16 itself: a reused store's restore of
// its changelog's tail is cut off by the view's context ending while a
// fetch is held (a revoke). Goka calls MarkRecovered all the same; the
// store keeps the time it last held its changelog whole, and is wiped once
// that is MaxOffline ago.
func TestGokaCutOffRestoreKeepsTheStamp(t *testing.T) {
	r := newChangelogRig(t)
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	r.direct.Clock, r.direct.MaxOffline = clk, 6*24*time.Hour
	r.write(t, val("a", "1"), val("b", "2"))
	r.restoreInto(t, r.direct) // caught up on day 0
	r.write(t, tomb("a"), val("c", "3"))
	clk.Advance(5 * 24 * time.Hour)

	fetching, release := make(chan struct{}), make(chan struct{})
	var held atomic.Bool
	r.cluster.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		r.cluster.KeepControl()
		if held.CompareAndSwap(false, true) { // Goka's first fetch of the tail
			close(fetching)
			r.cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	var releaseOnce sync.Once
	releaseFetch := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseFetch()
	var st *markOrdered
	build := func(topic string, partition int32) (storage.Storage, error) {
		inner, err := r.direct.Builder()(topic, partition)
		st = &markOrdered{Storage: inner, called: make(chan struct{})}
		return st, err
	}
	v, err := goka.NewView(r.k.Brokers, goka.Table(r.topic), new(codec.Bytes),
		append(r.k.ViewOptions(), goka.WithViewStorageBuilder(build), goka.WithViewLogger(quiet{}))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx) }()
	<-fetching
	cancel() // the revoke
	select {
	case <-st.called:
	case <-time.After(orderBound):
		t.Fatal("Goka did not call MarkRecovered after a restore cut off by its context")
	}
	if st.err == nil {
		t.Error("MarkRecovered after a restore cut off at offset 1 of 3: no error")
	}
	releaseFetch() // Goka's consumer closes once its fetch returns
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	clk.Advance(2 * 24 * time.Hour) // 7 days after the store last held its changelog whole
	reopened := openOn(t, r.direct, r.topic)
	defer mustClose(t, reopened)
	if off := mustOffset(t, reopened); off != -2 {
		t.Fatalf("GetOffset = %d 7 days after the store last held its changelog whole, want -2 (wiped)", off)
	}
}
