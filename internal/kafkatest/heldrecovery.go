package kafkatest

import (
	"testing"

	"github.com/lovoo/goka/storage"
)

// HeldRecovery is a Goka store whose MarkRecovered waits for the test:
// Entered is closed when it is called, and it returns once Release is
// closed. A test holds it to close a partition while Goka's MarkRecovered
// runs, as a revoke that cuts a restore off does.
type HeldRecovery struct {
	storage.Storage
	Entered, Release chan struct{}
}

// NewHeldRecovery holds inner's MarkRecovered.
func NewHeldRecovery(inner storage.Storage) *HeldRecovery {
	return &HeldRecovery{Storage: inner, Entered: make(chan struct{}), Release: make(chan struct{})}
}

// MarkRecovered closes Entered, waits for Release, then marks the store
// recovered.
func (h *HeldRecovery) MarkRecovered() error {
	close(h.Entered)
	<-h.Release
	return h.Storage.MarkRecovered()
}

// CloseDuringMarkRecovered runs st's MarkRecovered on a goroutine of its
// own, as Goka does after a cut-off restore, closes st while the held store
// beneath it (h) is inside MarkRecovered, then lets it finish, and returns
// what MarkRecovered returned. A Close error fails the test.
func (h *HeldRecovery) CloseDuringMarkRecovered(t testing.TB, st storage.Storage) error {
	t.Helper()
	recovered := make(chan error, 1)
	go func() { recovered <- st.MarkRecovered() }()
	<-h.Entered
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	close(h.Release)
	return <-recovered
}
