package kafkaclient

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/IBM/sarama"
)

// claimingSession is Sarama's session of one input partition ("in", 0):
// it records the offsets marked on it.
type claimingSession struct {
	sarama.ConsumerGroupSession
	claims map[string][]int32
	mu     sync.Mutex
	marks  map[string][]int64
}

func newClaimingSession(topics ...string) *claimingSession {
	s := &claimingSession{claims: map[string][]int32{}, marks: map[string][]int64{}}
	for _, t := range topics {
		s.claims[t] = []int32{0}
	}
	return s
}

func (s *claimingSession) Claims() map[string][]int32 { return s.claims }

func (s *claimingSession) MarkOffset(topic string, _ int32, offset int64, _ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marks[topic] = append(s.marks[topic], offset)
}

func (s *claimingSession) marked(topic string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.marks[topic])
}

// fakeClaim is a claim of partition 0 of a topic, whose records are offsets.
type fakeClaim struct {
	sarama.ConsumerGroupClaim
	topic string
	msgs  chan *sarama.ConsumerMessage
}

func newFakeClaim(topic string, offsets ...int64) fakeClaim {
	c := fakeClaim{topic: topic, msgs: make(chan *sarama.ConsumerMessage, len(offsets))}
	for _, o := range offsets {
		c.msgs <- &sarama.ConsumerMessage{Topic: topic, Offset: o}
	}
	close(c.msgs)
	return c
}

func (c fakeClaim) Topic() string                            { return c.topic }
func (c fakeClaim) Partition() int32                         { return 0 }
func (c fakeClaim) Messages() <-chan *sarama.ConsumerMessage { return c.msgs }

// orderHandler is Goka's handler: it takes the records of its claim, then
// marks the offsets of marks (offset + 1, as Goka) in that order, on the
// session of its Setup (Goka's committer). after, if set, is marked after
// Cleanup (an acknowledgement that comes once the session ended).
type orderHandler struct {
	got      []int64
	marks    []int64
	after    []int64
	setup    sarama.ConsumerGroupSession
	claimMsg <-chan *sarama.ConsumerMessage
}

func (h *orderHandler) Setup(s sarama.ConsumerGroupSession) error { h.setup = s; return nil }

func (h *orderHandler) ConsumeClaim(_ sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	h.claimMsg = c.Messages()
	for m := range c.Messages() {
		h.got = append(h.got, m.Offset)
	}
	for _, o := range h.marks {
		h.setup.MarkMessage(&sarama.ConsumerMessage{Topic: c.Topic(), Offset: o}, "")
	}
	return nil
}

func (h *orderHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// claimSession runs one session with one claim.
type claimSession struct {
	sarama.ConsumerGroup
	sess  sarama.ConsumerGroupSession
	claim sarama.ConsumerGroupClaim
}

func (g claimSession) Consume(_ context.Context, _ []string, h sarama.ConsumerGroupHandler) error {
	if err := h.Setup(g.sess); err != nil {
		return err
	}
	if err := h.ConsumeClaim(g.sess, g.claim); err != nil {
		return err
	}
	return h.Cleanup(g.sess)
}

// A partition is committed only up to the first record handed to Goka that
// Goka has not marked, whatever the order of Goka's marks; the offsets
// between records (a compacted topic's gaps) do not hold anything back.
func TestHoldCommitsInOrder(t *testing.T) {
	sess := newClaimingSession("in")
	h := &orderHandler{marks: []int64{7, 9, 3, 5, 8}}
	g := HoldCommits(claimSession{sess: sess, claim: newFakeClaim("in", 3, 5, 7, 8, 9)}, nil)
	if err := g.Consume(context.Background(), nil, h); err != nil {
		t.Fatal(err)
	}
	if want := []int64{3, 5, 7, 8, 9}; !slices.Equal(h.got, want) {
		t.Fatalf("Goka got %v, want %v", h.got, want)
	}
	// 7 and 9 wait for 3; 3 commits 4; 5 commits 8 (7 done); 8 commits 10.
	if got, want := sess.marked("in"), []int64{4, 8, 10}; !slices.Equal(got, want) {
		t.Fatalf("Sarama's session got marks %v, want %v", got, want)
	}
}

// A record handed to Goka and never marked (its write was not
// acknowledged) holds back every later one.
func TestHoldCommitsHoldsBehindUnmarked(t *testing.T) {
	sess := newClaimingSession("in")
	h := &orderHandler{marks: []int64{0, 2, 3}}
	if err := HoldCommits(claimSession{sess: sess, claim: newFakeClaim("in", 0, 1, 2, 3)}, nil).Consume(context.Background(), nil, h); err != nil {
		t.Fatal(err)
	}
	if got, want := sess.marked("in"), []int64{1}; !slices.Equal(got, want) {
		t.Fatalf("Sarama's session got marks %v, want %v", got, want)
	}
}

// Nothing is marked on a session once it ended: an acknowledgement that
// comes after Cleanup leaves the record to the next session.
func TestHoldCommitsNothingAfterEnd(t *testing.T) {
	sess := newClaimingSession("in")
	h := &orderHandler{}
	if err := HoldCommits(claimSession{sess: sess, claim: newFakeClaim("in", 0, 1)}, nil).Consume(context.Background(), nil, h); err != nil {
		t.Fatal(err)
	}
	h.setup.MarkOffset("in", 0, 1, "")
	h.setup.MarkOffset("other", 0, 1, "")
	if got := sess.marked("in"); len(got) != 0 {
		t.Fatalf("marks %v on a session that ended", got)
	}
	if got := sess.marked("other"); len(got) != 0 {
		t.Fatalf("marks %v of a topic not claimed, on a session that ended", got)
	}
}

// ordering keeps the order of "calls" itself, and passes every mark.
type ordering struct{ keeper }

func (ordering) KeepsOrder(topic string) bool { return topic == "calls" }
func (o *ordering) Mark(_ sarama.ConsumerGroupSession, topic string, _ int32, next int64) bool {
	o.log = append(o.log, topic+"@"+string(rune('0'+next)))
	return true
}

// The topics a keeper orders itself are left to it: their claims reach
// Goka as Sarama made them, and the marks it passes go on at once. The
// others are kept in order after the keeper passed them.
func TestHoldCommitsLeavesKeptTopicsToKeeper(t *testing.T) {
	sess := newClaimingSession("calls", "loop")
	calls := newFakeClaim("calls", 0, 1)
	h := &orderHandler{marks: []int64{1}}
	k := &ordering{}
	if err := HoldCommits(claimSession{sess: sess, claim: calls}, k).Consume(context.Background(), nil, h); err != nil {
		t.Fatal(err)
	}
	if h.claimMsg != (<-chan *sarama.ConsumerMessage)(calls.msgs) {
		t.Fatal("the claim of a topic the keeper orders was wrapped")
	}
	if got, want := sess.marked("calls"), []int64{2}; !slices.Equal(got, want) {
		t.Fatalf("marks of calls %v, want %v", got, want)
	}

	sess = newClaimingSession("calls", "loop")
	h = &orderHandler{marks: []int64{1}}
	k = &ordering{}
	if err := HoldCommits(claimSession{sess: sess, claim: newFakeClaim("loop", 0, 1)}, k).Consume(context.Background(), nil, h); err != nil {
		t.Fatal(err)
	}
	if got := sess.marked("loop"); len(got) != 0 {
		t.Fatalf("loop marked %v past its unmarked record 0", got)
	}
	if want := []string{"begin", "loop@2", "end"}; !slices.Equal(k.log, want) {
		t.Fatalf("keeper told %v, want %v", k.log, want)
	}
}

// Records handed and marked in turn, with one held back for a while: the
// ring wraps and grows, the marks only grow, and each stops at the held
// record until it is marked.
func TestHoldCommitsRingWrapsAndGrows(t *testing.T) {
	sess := newClaimingSession("in")
	p := &partitionOrder{sess: sess, topic: "in"}
	const n, lag, held = 1000, 10, 500
	for i := range int64(n) {
		p.handed(i)
		if j := i - lag; j >= 0 && j != held && (j < held || i >= held+200) {
			p.marked(j, "")
		}
		if i == held+200 {
			for j := int64(held + 1); j < i-lag; j++ {
				p.marked(j, "")
			}
			if got := sess.marked("in"); got[len(got)-1] != held {
				t.Fatalf("marked up to %d with %d not marked", got[len(got)-1], held)
			}
			p.marked(held, "")
		}
	}
	for j := int64(n - lag); j < n; j++ {
		p.marked(j, "")
	}
	got := sess.marked("in")
	if !slices.IsSorted(got) || got[len(got)-1] != n {
		t.Fatalf("marks not increasing to %d: ... %v", n, got[max(0, len(got)-5):])
	}
	if p.n != 0 {
		t.Fatalf("%d records left", p.n)
	}
}

// One record handed over and marked, as on a busy partition: no allocation
// once the ring has grown.
func BenchmarkHoldCommitsRecord(b *testing.B) {
	p := &partitionOrder{sess: discardSession{}, topic: "in"}
	b.ReportAllocs()
	for i := range int64(b.N) {
		p.handed(i)
		if i >= 32 {
			p.marked(i-32, "")
		}
	}
}

type discardSession struct{ sarama.ConsumerGroupSession }

func (discardSession) MarkOffset(string, int32, int64, string) {}
