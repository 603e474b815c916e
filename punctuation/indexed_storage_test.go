package punctuation

import (
	"testing"
	"time"

	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/internal/clock"
)

// heldRecovery is a store whose MarkRecovered waits for the test: entered
// is closed when it is called, and it returns once release is closed.
type heldRecovery struct {
	storage.Storage
	entered, release chan struct{}
}

func (h *heldRecovery) MarkRecovered() error {
	close(h.entered)
	<-h.release
	return h.Storage.MarkRecovered()
}

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
	inner := &heldRecovery{Storage: storage.NewMemory(), entered: make(chan struct{}), release: make(chan struct{})}
	st := wrap(t, p, 1, inner)
	recovered := make(chan error, 1)
	go func() { recovered <- st.MarkRecovered() }()
	<-inner.entered
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	close(inner.release)
	if err := <-recovered; err != nil {
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
