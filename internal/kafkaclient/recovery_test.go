package kafkaclient

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
)

// watchedStorage is a memory storage that reports what Goka does with it:
// the records restored (Set before MarkRecovered), the offsets SetOffset
// got before and after MarkRecovered, and MarkRecovered itself. If gate is
// set, the Set of record gateAt waits for it (after closing reached).
type watchedStorage struct {
	storage.Storage
	sets      atomic.Int64
	gateAt    int64
	reached   chan struct{}
	gate      chan struct{}
	recovered chan struct{}
	once      sync.Once

	mu             sync.Mutex
	isRecovered    bool
	restoreOffsets []int64
	ackOffsets     []int64
	acked          chan int64
}

func newWatchedStorage() *watchedStorage {
	return &watchedStorage{Storage: storage.NewMemory(), reached: make(chan struct{}), recovered: make(chan struct{}), acked: make(chan int64, 64)}
}

func (s *watchedStorage) Set(key string, value []byte) error {
	if n := s.sets.Add(1); s.gate != nil && n == s.gateAt {
		close(s.reached)
		<-s.gate
	}
	return s.Storage.Set(key, value)
}

func (s *watchedStorage) SetOffset(off int64) error {
	s.mu.Lock()
	if s.isRecovered {
		s.ackOffsets = append(s.ackOffsets, off)
		s.acked <- off
	} else {
		s.restoreOffsets = append(s.restoreOffsets, off)
	}
	s.mu.Unlock()
	return s.Storage.SetOffset(off)
}

func (s *watchedStorage) MarkRecovered() error {
	s.mu.Lock()
	s.isRecovered = true
	s.mu.Unlock()
	s.once.Do(func() { close(s.recovered) })
	return s.Storage.MarkRecovered()
}

func (s *watchedStorage) offsets() (restore, acks []int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.restoreOffsets), slices.Clone(s.ackOffsets)
}

// runView runs a view of table (one partition) on st until cancel is
// called; done receives what Run returned.
func runView(t *testing.T, k Kafka, table string, st storage.Storage) (cancel func(), done <-chan error) {
	t.Helper()
	opts := append(k.ViewOptions(), goka.WithViewStorageBuilder(func(string, int32) (storage.Storage, error) { return st, nil }))
	v, err := goka.NewView(k.Brokers, goka.Table(table), new(codec.String), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- v.Run(ctx) }()
	t.Cleanup(cancel)
	return cancel, ended
}

func records(n int) []string {
	vs := make([]string, n)
	for i := range vs {
		vs[i] = fmt.Sprint(i)
	}
	return vs
}

// Goka calls MarkRecovered once the restore of a partition reached the
// high-water mark it read when the restore began: every record was Set
// before it, and SetOffset got each restored record's offset, from 0.
func TestMarkRecoveredWhenRestoreReachesHighWaterMark(t *testing.T) {
	_, k := broker(t)
	topics(t, k, "v-table")
	produce(t, k, "v-table", "key", records(5)...)
	st := newWatchedStorage()
	cancel, done := runView(t, k, "v-table", st)
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("view: %v", err)
		}
	}()
	within(t, st.recovered, "MarkRecovered")
	if n := st.sets.Load(); n != 5 {
		t.Fatalf("MarkRecovered after %d records restored, want 5", n)
	}
	if restore, _ := st.offsets(); !slices.Equal(restore, []int64{0, 1, 2, 3, 4}) {
		t.Fatalf("SetOffset during the restore: %v, want every offset 0 to 4", restore)
	}
}

// When the restore's context ends before the high-water mark (a revoke, a
// stop), Goka's partition table returns without an error and still calls
// MarkRecovered, on a goroutine nobody waits for: a store cannot take
// MarkRecovered as "restored to the end" (issue 30, defect 3).
func TestMarkRecoveredWhenRestoreIsCutOff(t *testing.T) {
	_, k := broker(t)
	topics(t, k, "cut-table")
	const n = 500
	produce(t, k, "cut-table", "key", records(n)...)
	st := newWatchedStorage()
	st.gateAt, st.gate = 10, make(chan struct{})
	cancel, done := runView(t, k, "cut-table", st)
	within(t, st.reached, "the restore under way")
	cancel()
	close(st.gate)
	within(t, st.recovered, "MarkRecovered after the restore was cut off")
	if err := within(t, done, "the view's end"); err != nil {
		t.Fatalf("view: %v", err)
	}
	if got := st.sets.Load(); got >= n {
		t.Fatalf("%d of %d records restored: the restore was not cut off", got, n)
	}
	t.Logf("MarkRecovered after %d of %d records restored", st.sets.Load(), n)
}

// After MarkRecovered, SetOffset comes with the acknowledgement of each of
// the processor's own table writes (from the producer's goroutine,
// concurrently with Set), with the write's changelog offset, except a
// write at offset 0, for which Goka calls nothing.
func TestSetOffsetAfterRecoveryComesWithAcknowledgedWritesButOffsetZero(t *testing.T) {
	_, k := broker(t)
	topics(t, k, "in", "so-table")
	st := newWatchedStorage()
	g := goka.DefineGroup("so",
		goka.Input("in", new(codec.String), func(ctx goka.Context, msg any) { ctx.SetValue(msg) }),
		goka.Persist(new(codec.String)))
	opts := append(k.ProcessorOptions(), goka.WithStorageBuilder(func(string, int32) (storage.Storage, error) { return st, nil }))
	p, err := goka.NewProcessor(k.Brokers, g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("processor: %v", err)
		}
	}()
	produce(t, k, "in", "key", "a", "b", "c")
	for _, want := range []int64{1, 2} {
		if got := within(t, st.acked, "SetOffset of an acknowledged write"); got != want {
			t.Fatalf("SetOffset(%d), want %d", got, want)
		}
	}
	restore, acks := st.offsets()
	if len(restore) != 0 || !slices.Equal(acks, []int64{1, 2}) {
		t.Fatalf("SetOffset before MarkRecovered %v, after %v; want none, then 1 and 2 (no call for offset 0)", restore, acks)
	}
}
