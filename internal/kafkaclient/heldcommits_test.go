package kafkaclient

import (
	"context"
	"slices"
	"testing"

	"github.com/IBM/sarama"
)

// recordingSession is Sarama's session: it records the marks that reach it.
// It claims nothing (the claims of an input are kept in order: order_test).
type recordingSession struct {
	sarama.ConsumerGroupSession
	marks []string
}

func (s *recordingSession) Claims() map[string][]int32 { return nil }

func (s *recordingSession) MarkOffset(topic string, _ int32, offset int64, _ string) {
	s.marks = append(s.marks, topic+"@"+string(rune('0'+offset)))
}

// oneSession runs one session of the handler given to Consume, on sess.
type oneSession struct {
	sarama.ConsumerGroup
	sess sarama.ConsumerGroupSession
}

func (g oneSession) Consume(_ context.Context, _ []string, h sarama.ConsumerGroupHandler) error {
	if err := h.Setup(g.sess); err != nil {
		return err
	}
	if err := h.ConsumeClaim(g.sess, stubClaim{}); err != nil {
		return err
	}
	return h.Cleanup(g.sess)
}

// stubClaim is a claim of a topic the session does not list.
type stubClaim struct{ sarama.ConsumerGroupClaim }

func (stubClaim) Topic() string    { return "elsewhere" }
func (stubClaim) Partition() int32 { return 0 }

// gokaMarker marks like Goka: through the session its Setup got (the
// message committer) and the one of ConsumeClaim.
type gokaMarker struct{ t *testing.T }

func (h gokaMarker) Setup(s sarama.ConsumerGroupSession) error {
	s.MarkOffset("calls", 0, 1, "")
	s.MarkOffset("loop", 0, 2, "")
	return nil
}

func (h gokaMarker) ConsumeClaim(s sarama.ConsumerGroupSession, _ sarama.ConsumerGroupClaim) error {
	s.MarkMessage(&sarama.ConsumerMessage{Topic: "calls", Offset: 2}, "")
	s.MarkMessage(&sarama.ConsumerMessage{Topic: "events", Offset: 4}, "")
	return nil
}

func (h gokaMarker) Cleanup(s sarama.ConsumerGroupSession) error {
	s.MarkOffset("calls", 0, 5, "")
	return nil
}

// keeper holds the marks of "calls", and records what it is told.
type keeper struct {
	log []string
}

func (k *keeper) Begin(sarama.ConsumerGroupSession) { k.log = append(k.log, "begin") }
func (k *keeper) End(sarama.ConsumerGroupSession)   { k.log = append(k.log, "end") }
func (k *keeper) Mark(s sarama.ConsumerGroupSession, topic string, _ int32, next int64) bool {
	if _, inner := s.(*recordingSession); !inner {
		panic("the keeper got Goka's session, not Sarama's")
	}
	k.log = append(k.log, topic+"@"+string(rune('0'+next)))
	return topic != "calls"
}

// Goka's marks of the held topic reach the keeper only; the others reach
// the keeper and Sarama's session; the keeper hears of the session before
// Goka's Setup and after its Cleanup.
func TestHoldCommits(t *testing.T) {
	sess := &recordingSession{}
	k := &keeper{}
	g := HoldCommits(oneSession{sess: sess}, k)
	if err := g.Consume(context.Background(), nil, gokaMarker{t}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"loop@2", "events@5"}; !slices.Equal(sess.marks, want) {
		t.Fatalf("Sarama's session got %v, want %v", sess.marks, want)
	}
	if want := []string{"begin", "calls@1", "loop@2", "calls@3", "events@5", "calls@5", "end"}; !slices.Equal(k.log, want) {
		t.Fatalf("keeper told %v, want %v", k.log, want)
	}
}

// watcher is a keeper that is told of the claims too.
type watcher struct{ keeper }

func (w *watcher) Claim(s sarama.ConsumerGroupSession, _ sarama.ConsumerGroupClaim) {
	if _, inner := s.(*recordingSession); !inner {
		panic("the watcher got Goka's session, not Sarama's")
	}
	w.log = append(w.log, "claim")
}

// A keeper that watches claims hears of each with Sarama's session, before
// Goka consumes it.
func TestHoldCommitsTellsOfClaims(t *testing.T) {
	w := &watcher{}
	if err := HoldCommits(oneSession{sess: &recordingSession{}}, w).Consume(context.Background(), nil, gokaMarker{t}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"begin", "calls@1", "loop@2", "claim", "calls@3", "events@5", "calls@5", "end"}; !slices.Equal(w.log, want) {
		t.Fatalf("keeper told %v, want %v", w.log, want)
	}
}
