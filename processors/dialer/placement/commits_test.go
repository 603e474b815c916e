package placement

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Records done out of order are committed in order: the watermark is the
// lowest offset not done, and only grows.
func TestCommitsInOrder(t *testing.T) {
	var marks []int64
	c := newCommits(func(next int64) { marks = append(marks, next) })
	c.add(10, 1) // dropped: Goka's commit only
	c.add(11, 2) // handed to the placer
	c.add(13, 2) // (12 was not a call: compacted or a marker)
	c.add(14, 1)
	c.add(11, 1) // not above the last registered: ignored
	c.done(14)
	c.done(11) // Goka's commit of 11; its call is still held
	c.done(13)
	c.done(13)
	if len(marks) != 0 || c.watermark() != 10 {
		t.Fatalf("marks %v, watermark %d before 10 is done", marks, c.watermark())
	}
	c.done(10)
	if !slices.Equal(marks, []int64{11}) || c.pending() != 1 {
		t.Fatalf("marks %v, pending %d: 11 waits for its status", marks, c.pending())
	}
	c.done(11) // its status recorded: 13 and 14 are done already
	c.done(11) // a second done changes nothing
	c.done(99) // an offset never registered changes nothing
	if !slices.Equal(marks, []int64{11, 15}) || c.pending() != 0 || c.watermark() != 15 {
		t.Fatalf("marks %v, pending %d, watermark %d", marks, c.pending(), c.watermark())
	}
	c.unbind()
	c.add(15, 1)
	c.done(15)
	if !slices.Equal(marks, []int64{11, 15}) {
		t.Fatalf("marked after unbind: %v", marks)
	}
}

// A long run keeps its memory to the records not done.
func TestCommitsCompact(t *testing.T) {
	var last int64
	c := newCommits(func(next int64) { last = next })
	for o := range int64(10_000) {
		c.add(o, 1)
		c.done(o)
	}
	if last != 10_000 || cap(c.offsets) > 4096 {
		t.Fatalf("marked %d, capacity %d", last, cap(c.offsets))
	}
}

// session is a consumer group session that records the marks it gets.
type session struct {
	sarama.ConsumerGroupSession
	mu     sync.Mutex
	marks  map[string][]int64 // "topic/partition" -> offsets marked
	marked chan struct{}      // told of each mark
}

func newSession() *session {
	return &session{marks: map[string][]int64{}, marked: make(chan struct{}, 1)}
}

func (s *session) MarkOffset(topic string, part int32, offset int64, _ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := topic + "/" + string(rune('0'+part))
	s.marks[k] = append(s.marks[k], offset)
	select {
	case s.marked <- struct{}{}:
	default:
	}
}

// await returns once topic's partition was marked want (marks made in
// the background, by the placer's sweeper).
func (s *session) await(t *testing.T, topic string, part int32, want []int64) {
	t.Helper()
	for !slices.Equal(s.got(topic, part), want) {
		select {
		case <-s.marked:
		case <-time.After(10 * time.Second): // a guard, not a wait for the event
			t.Fatalf("%s/%d marked %v, want %v", topic, part, s.got(topic, part), want)
		}
	}
}

func (s *session) got(topic string, part int32) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.marks[topic+"/"+string(rune('0'+part))])
}

// The placer keeps the dialer group's commits of ivr-calls: Goka's marks
// of ivr-calls are held until the calls' first statuses are recorded (the
// loop record that recorded it committed by Goka) or their users
// forgotten; Goka's marks of the loop topic go on. Nothing is marked on a
// session that ended, nor by a partition of an older session.
func TestPlacerKeepsTheCallsCommits(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 1})
	f.prov.gate = make(chan struct{})
	s1 := newSession()
	f.p.Begin(s1)
	st := f.open(t, 0, nil)
	f.record(t, st, 0, call("a", "a1"), call("b", "b1")) // offsets 0 and 1
	f.p.Track(0, 2)                                      // a duplicate, dropped
	f.next[0] = 3
	f.record(t, st, 0, call("c", "c1")) // 3
	if ok, err := f.p.Submit(context.Background(), 0, 4, call("a", "a1")); ok || err != nil {
		t.Fatalf("a call id held already was taken again: %v %v", ok, err)
	}
	for o := int64(1); o <= 4; o++ { // Goka commits the callbacks, 0 last
		if f.p.Mark(s1, calls, 0, o+1) {
			t.Fatal("Goka's mark of ivr-calls passed on")
		}
	}
	f.p.Mark(s1, calls, 0, 1)
	if got := s1.got(calls, 0); len(got) != 0 {
		t.Fatalf("ivr-calls marked %v before any status was recorded", got)
	}
	// b1's first status is recorded by loop record 40, a1's by 41; Goka
	// commits 41 first.
	if f.p.Record(0, "b", "b1", 40) == nil || f.p.Record(0, "a", "a1", 41) == nil {
		t.Fatal("held calls not recorded")
	}
	if !f.p.Mark(s1, loop, 0, 42) {
		t.Fatal("Goka's mark of the loop topic held")
	}
	if got := s1.got(calls, 0); !slices.Equal(got, []int64{1}) {
		t.Fatalf("ivr-calls marked %v, want [1] (b1 at 1 not recorded yet)", got)
	}
	// Events are committed in order too; a Forget only once it retired (a
	// call fired after it is consumed: d1 below) and every call before is
	// committed: here once b1 (1) is recorded.
	f.p.Event(0, 20)
	f.p.Forget(0, "c", t0, 21) // c1 (3) dropped
	f.p.Event(0, 22)
	for _, o := range []int64{22, 21, 20} {
		if f.p.Mark(s1, evs, 0, o+1) {
			t.Fatal("Goka's mark of followup-events passed on")
		}
	}
	if got := s1.got(evs, 0); !slices.Equal(got, []int64{21}) {
		t.Fatalf("followup-events marked %v, want [21]: the Forget waits for b1", got)
	}
	if got := s1.got(evs, 0); !slices.Equal(got, []int64{21}) {
		t.Fatalf("followup-events marked %v, want [21]: the Forget is recent", got)
	}
	d1 := call("d", "d1")
	d1.FiredAt = timestamppb.New(t0.Add(time.Second))
	if f.p.Forgotten(0, d1) {
		t.Fatal("a call fired after the Forget of another user dropped")
	}
	f.p.Mark(s1, loop, 0, 41)
	if got := s1.got(calls, 0); !slices.Equal(got, []int64{1, 5}) {
		t.Fatalf("ivr-calls marked %v, want [1 5]", got)
	}
	if got := s1.got(evs, 0); !slices.Equal(got, []int64{21, 23}) {
		t.Fatalf("followup-events marked %v, want [21 23]", got)
	}
	if got := s1.got(loop, 0); len(got) != 0 {
		t.Fatalf("the placer marked the loop topic itself: %v", got)
	}

	// The session ends: a partition of it marks nothing any more, and the
	// marks of the next session go to that session only.
	f.record(t, st, 0, d1) // 5
	f.p.Mark(s1, calls, 0, 6)
	f.p.End(s1)
	f.p.Record(0, "d", "d1", 50)
	f.p.Mark(s1, loop, 0, 51)
	if got := s1.got(calls, 0); !slices.Equal(got, []int64{1, 5}) {
		t.Fatalf("marked %v on a session that ended", got)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := newSession()
	f.p.Begin(s2)
	st = f.open(t, 0, nil)
	defer st.Close()
	f.p.Track(0, 5)
	f.p.Mark(s1, calls, 0, 6) // a late mark of the old session
	if got := s2.got(calls, 0); len(got) != 0 {
		t.Fatalf("the old session's mark counted in the new one: %v", got)
	}
	f.p.Mark(s2, calls, 0, 6)
	if got := s2.got(calls, 0); !slices.Equal(got, []int64{6}) {
		t.Fatalf("new session marked %v", got)
	}
	close(f.prov.gate)
}

// A call given up with its partition while a worker places it, and held
// again by the partition's next session, waits for that worker; once its
// status is recorded, it is skipped, and its id can be placed again later.
func TestCallHeldAgainWaitsForItsWorker(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 2})
	f.prov.gate = make(chan struct{})
	f.prov.entered = make(chan string, 2)
	st := f.open(t, 0, nil)
	f.record(t, st, 0, call("a", "a1"))
	<-f.prov.entered
	if err := st.Close(); err != nil { // a rebalance: the next session holds a1 again
		t.Fatal(err)
	}
	st = f.open(t, 0, nil)
	defer st.Close()
	f.record(t, st, 0, call("a", "a1"))
	if f.p.Record(0, "a", "a1", 1) == nil { // a status callback, recorded
		t.Fatal("a1 not held by the new session")
	}
	f.prov.gate <- struct{}{} // the first worker's request is answered
	idle(f.p)
	if got := f.prov.Seen(); len(got) != 1 || f.p.Stats.Skipped.Load() != 1 {
		t.Fatalf("placed %v, skipped %d", got, f.p.Stats.Skipped.Load())
	}
	f.p.Record(0, "a", "a1", 2)         // the answer reaches the dialer
	f.record(t, st, 0, call("a", "a1")) // its id is free again (a replay after a crash would be dropped by the dialer)
	f.prov.gate <- struct{}{}
	idle(f.p)
	if got := f.prov.Seen(); len(got) != 2 {
		t.Fatalf("placed %v: the id stayed busy", got)
	}
}

// A call the session before answered (its answer sent, not yet recorded)
// and the next session holds again is not placed again: its answer, on its
// way, releases it.
func TestCallAnsweredInTheSessionBeforeIsNotPlacedAgain(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 2})
	f.prov.gate = make(chan struct{})
	f.prov.entered = make(chan string, 2)
	st := f.open(t, 0, nil)
	f.record(t, st, 0, call("a", "a1"))
	<-f.prov.entered
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = f.open(t, 0, nil)
	defer st.Close()
	f.record(t, st, 0, call("a", "a1")) // waits for the worker of the session before
	close(f.prov.gate)
	idle(f.p)
	if got := f.prov.Seen(); len(got) != 1 || len(f.ans.all()) != 1 || f.p.Stats.Skipped.Load() != 1 {
		t.Fatalf("placed %v, %d answers, skipped %d", got, len(f.ans.all()), f.p.Stats.Skipped.Load())
	}
	if c := f.p.Record(0, "a", "a1", 3); c.GetCallId() != "a1" {
		t.Fatalf("the answer did not release the call held again: %v", c)
	}
}
