package dueindex

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
)

// wrap wraps inner as the punctuator's storage of partition part.
func wrap(t *testing.T, p *Punctuator, part int32, inner storage.Storage) storage.Storage {
	t.Helper()
	st, err := p.StorageBuilder(func(string, int32) (storage.Storage, error) { return inner, nil })("tbl", part)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	if err := st.Set("u", enc(t0.Add(time.Second))); err != nil { // Goka's restore
		t.Fatal(err)
	}
	return st
}

// When a revoke cuts Goka's restore off, Goka runs MarkRecovered in a
// goroutine nothing waits for and closes the partition meanwhile. A
// partition closed while its MarkRecovered runs, or before it, is not
// registered once it returns: no ticks for it, no gauges counting it.
func TestMarkRecoveredRacingCloseRegistersNothing(t *testing.T) {
	p := newTestPunctuator(t, clock.NewFake(t0), nil)
	inner := kafkatest.NewHeldRecovery(storage.NewMemory())
	st := wrap(t, p, 1, inner)
	if err := inner.CloseDuringMarkRecovered(t, st); err != nil {
		t.Logf("MarkRecovered racing Close: %v", err)
	}
	if x := p.Index(1); x != nil {
		t.Errorf("partition 1 registered with %d pending after it was closed", x.Len())
	}

	st = wrap(t, p, 2, storage.NewMemory())
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	if x := p.Index(2); x != nil {
		t.Errorf("partition 2 registered with %d pending by a MarkRecovered after Close", x.Len())
	}
}

// heldRead is a store whose next Get, once armed, reads the value, then
// tells read and waits for release before it returns it.
type heldRead struct {
	storage.Storage
	armed         atomic.Bool
	read, release chan struct{}
}

func (h *heldRead) Get(key string) ([]byte, error) {
	v, err := h.Storage.Get(key)
	if h.armed.CompareAndSwap(true, false) {
		close(h.read)
		<-h.release
	}
	return v, err
}

// A read for the web page or the admin API (Processor.Get, from another
// goroutine) reaches the same storage as the callbacks' reads. One that
// read a user's value before a callback's write and returns after the
// callback's next read must not leave its old value for the next write
// to take as the one it replaces: the index would drop the follow-ups of
// a value long gone and keep those of the value replaced.
func TestQueryReadDoesNotFeedTheIndex(t *testing.T) {
	p := newTestPunctuator(t, clock.NewFake(t0), nil)
	inner := &heldRead{Storage: storage.NewMemory(), read: make(chan struct{}), release: make(chan struct{})}
	value := func(id string, after time.Duration) []byte {
		return encValue(Value{Pending: []Task{{Due: t0.Add(after).UnixNano(), ID: id}}})
	}
	st := open(t, p, "tbl", 0, inner, func(st storage.Storage) {
		if err := st.Set("u", value("t1", time.Second)); err != nil {
			t.Fatal(err)
		}
	})
	get := func() {
		t.Helper()
		if _, err := st.Get("u"); err != nil {
			t.Fatal(err)
		}
	}
	set := func(v []byte) {
		t.Helper()
		if err := st.Set("u", v); err != nil {
			t.Fatal(err)
		}
	}

	inner.armed.Store(true)
	queried := make(chan struct{})
	go func() { // the query: reads t1's value, returns after the callbacks below read
		defer close(queried)
		if _, err := st.Get("u"); err != nil {
			t.Error(err)
		}
	}()
	<-inner.read
	get() // a callback: t1 -> t2
	set(value("t2", 2*time.Second))
	get() // the next callback reads t2's value...
	close(inner.release)
	<-queried // ...while the query returns t1's
	set(value("t3", 3*time.Second))

	want := []Pos{{Due: t0.Add(3 * time.Second).UnixNano(), User: "u", Task: "t3"}}
	if got := p.Index(0).Pending(); !slices.Equal(got, want) {
		t.Errorf("index pending %v after u's value went t1, t2, t3; want only t3", got)
	}
}
