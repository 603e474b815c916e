package kafkaclient

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// session is the part of a Sarama group session earlyClaims uses.
type session struct {
	sarama.ConsumerGroupSession
	ctx context.Context
}

func (s session) Context() context.Context { return s.ctx }

// gokaHandler stands for Goka's processor: its Setup blocks until release
// is closed and then returns setupErr; it records the order of its calls.
type gokaHandler struct {
	release  chan struct{}
	setupErr error

	mu    sync.Mutex
	calls []string
}

func (h *gokaHandler) record(c string) {
	h.mu.Lock()
	h.calls = append(h.calls, c)
	h.mu.Unlock()
}

func (h *gokaHandler) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls...)
}

func (h *gokaHandler) Setup(sarama.ConsumerGroupSession) error {
	<-h.release
	h.record("setup")
	return h.setupErr
}

func (h *gokaHandler) ConsumeClaim(sarama.ConsumerGroupSession, sarama.ConsumerGroupClaim) error {
	h.record("claim")
	return nil
}

func (h *gokaHandler) Cleanup(sarama.ConsumerGroupSession) error {
	h.record("cleanup")
	return nil
}

// claimed runs ConsumeClaim in the background, as Sarama does once Setup
// returned, and reports when it returned.
func claimed(e *earlyClaims, s session) <-chan error {
	done := make(chan error, 1)
	go func() { done <- e.ConsumeClaim(s, nil) }()
	return done
}

func returned(t *testing.T, c <-chan error, within time.Duration) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(within):
		t.Fatalf("ConsumeClaim did not return within %v", within)
		return nil
	}
}

func notReturned(t *testing.T, c <-chan error) {
	t.Helper()
	select {
	case err := <-c:
		t.Fatalf("ConsumeClaim returned (%v) before Goka's Setup and the gate", err)
	case <-time.After(50 * time.Millisecond):
	}
}

// Setup returns while Goka's Setup still restores, so that Sarama starts the
// partition consumers meanwhile; no claim reaches Goka before its Setup
// finished and the gate opened.
func TestEarlyClaimsOverlapSetup(t *testing.T) {
	h := &gokaHandler{release: make(chan struct{})}
	gate := make(chan struct{})
	e := &earlyClaims{ConsumerGroupHandler: h, gate: gate}
	s := session{ctx: context.Background()}

	setup := make(chan error, 1)
	go func() { setup <- e.Setup(s) }()
	if err := returned(t, setup, 2*time.Second); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	c := claimed(e, s)
	notReturned(t, c)
	if got := h.seen(); len(got) != 0 {
		t.Fatalf("Goka saw %v before its Setup returned", got)
	}
	close(h.release) // the partitions are restored
	notReturned(t, c)
	if got := h.seen(); len(got) != 1 || got[0] != "setup" {
		t.Fatalf("Goka saw %v, want setup only while the gate is shut", got)
	}
	close(gate) // the policy has been read
	if err := returned(t, c, 2*time.Second); err != nil {
		t.Fatalf("ConsumeClaim: %v", err)
	}
	if err := e.Cleanup(s); err != nil {
		t.Fatalf("Cleanup: %v", err)
	}
	if got := h.seen(); len(got) != 3 || got[1] != "claim" || got[2] != "cleanup" {
		t.Fatalf("Goka saw %v, want setup, claim, cleanup", got)
	}
}

// A failed Setup ends the session: the claims return without reaching Goka
// and Cleanup returns the error, so Consume fails as it did when Setup
// returned it.
func TestEarlyClaimsSetupFailure(t *testing.T) {
	boom := errors.New("restore failed")
	h := &gokaHandler{release: make(chan struct{}), setupErr: boom}
	e := &earlyClaims{ConsumerGroupHandler: h}
	s := session{ctx: context.Background()}
	if err := e.Setup(s); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	c := claimed(e, s)
	close(h.release)
	if err := returned(t, c, 2*time.Second); err != nil {
		t.Fatalf("ConsumeClaim: %v, want nil (Cleanup reports the failure)", err)
	}
	if err := e.Cleanup(s); !errors.Is(err, boom) {
		t.Fatalf("Cleanup: %v, want the Setup's error", err)
	}
	if got := h.seen(); len(got) != 2 || got[0] != "setup" || got[1] != "cleanup" {
		t.Fatalf("Goka saw %v, want setup, cleanup", got)
	}
}

// A session that ends while Goka's Setup runs (a rebalance) releases the
// claims at once; Cleanup still waits for the Setup before Goka's Cleanup.
func TestEarlyClaimsSessionEndsDuringSetup(t *testing.T) {
	h := &gokaHandler{release: make(chan struct{})}
	e := &earlyClaims{ConsumerGroupHandler: h, gate: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	s := session{ctx: ctx}
	if err := e.Setup(s); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	c := claimed(e, s)
	cancel()
	if err := returned(t, c, 2*time.Second); err != nil {
		t.Fatalf("ConsumeClaim: %v", err)
	}
	cleaned := make(chan error, 1)
	go func() { cleaned <- e.Cleanup(s) }()
	select {
	case err := <-cleaned:
		t.Fatalf("Cleanup returned (%v) while Goka's Setup ran", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(h.release)
	select {
	case err := <-cleaned:
		if err != nil {
			t.Fatalf("Cleanup: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Cleanup did not return after Goka's Setup did")
	}
	if got := h.seen(); len(got) != 2 || got[0] != "setup" || got[1] != "cleanup" {
		t.Fatalf("Goka saw %v, want setup, cleanup (no claim)", got)
	}
}
