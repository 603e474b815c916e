package placement

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// claim is a session's claim of a topic's partition: where it starts and
// its high watermark.
type claim struct {
	sarama.ConsumerGroupClaim
	topic         string
	initial, high int64
}

func (c claim) Topic() string              { return c.topic }
func (c claim) Partition() int32           { return 0 }
func (c claim) InitialOffset() int64       { return c.initial }
func (c claim) HighWaterMarkOffset() int64 { return c.high }

func firedAt(user, id string, at time.Time) *pb.IVRCall {
	c := call(user, id)
	c.FiredAt = timestamppb.New(at)
	return c
}

// consume does what the dialer's onCall does with a call: drop it (Track)
// if Forgotten, otherwise Submit it, at the next offset.
func (f *fixture) consume(t *testing.T, c *pb.IVRCall) (dropped bool) {
	t.Helper()
	off := f.next[0]
	f.next[0]++
	if f.p.Forgotten(0, c) {
		f.p.Track(0, off)
		return true
	}
	if _, err := f.p.Submit(t.Context(), 0, off, c); err != nil {
		t.Fatal(err)
	}
	return false
}

// session starts a session of partition 0 whose claims say where
// followup-events and ivr-calls end (their high watermarks; they start at
// 0).
func (f *fixture) session(t testing.TB, eventsEnd, callsEnd int64) *session {
	t.Helper()
	s := newSession()
	f.p.Begin(s)
	st := f.open(t, 0, nil)
	t.Cleanup(func() { _ = st.Close() })
	f.p.Claim(s, claim{topic: evs, high: eventsEnd})
	f.p.Claim(s, claim{topic: calls, high: callsEnd})
	return s
}

// A call consumed after its user's Forget and fired at or before it (or
// with no time) is dropped; other users' calls are not. On a quiet
// partition the Forget retires ForgetGrace after it was consumed, once
// ivr-calls is consumed to its end; its followup-events record is
// committed then, and not before.
func TestForgetDropsTheCallsFiredBeforeIt(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 1, ForgetGrace: time.Minute})
	s := f.session(t, 0, 5)   // no events to catch up with; one call more to come
	f.p.Forget(0, "u", t0, 0) // consumed before the calls fired before it
	for _, c := range []*pb.IVRCall{firedAt("u", "x", t0.Add(-time.Second)), firedAt("u", "y", t0), call("u", "z")} {
		if !f.consume(t, c) {
			t.Fatalf("%s placed after its user's Forget", c.GetCallId())
		}
	}
	if f.consume(t, firedAt("v", "w", t0.Add(-time.Second))) {
		t.Fatal("another user's call dropped")
	}
	idle(f.p)
	if got := f.prov.Seen(); !slices.Equal(got, []string{"w"}) {
		t.Fatalf("placed %v, want w only", got)
	}
	f.p.Record(0, "v", "w", 9)
	f.p.Mark(s, loop, 0, 10)
	for o := int64(1); o <= 4; o++ {
		f.p.Mark(s, calls, 0, o)
	}
	f.p.Mark(s, evs, 0, 1)
	s.await(t, calls, 0, []int64{1, 2, 3, 4})

	// Half the grace passes; another user's Forget comes.
	f.clk.BlockUntil(1)
	f.clk.Advance(30 * time.Second)
	f.clk.BlockUntil(1) // the sweeper looked, and waits again
	f.p.Forget(0, "k", t0.Add(time.Second), 1)
	f.p.Mark(s, evs, 0, 2)
	// u's grace passes; ivr-calls is not consumed to its end yet.
	f.clk.Advance(30 * time.Second)
	f.clk.BlockUntil(1)
	if got := s.got(evs, 0); len(got) != 0 || f.p.recent.Load() != 2 {
		t.Fatalf("followup-events marked %v, %d Forgets recent: retired before ivr-calls was consumed", got, f.p.recent.Load())
	}
	if !f.consume(t, firedAt("u", "late", t0.Add(-time.Millisecond))) { // the last one, late
		t.Fatal("the late call placed")
	}
	f.p.Mark(s, calls, 0, 5)
	f.clk.Advance(time.Second)
	s.await(t, evs, 0, []int64{1}) // u's Forget; k's is recent
	if f.p.recent.Load() != 1 || f.p.Forgotten(0, firedAt("u", "again", t0.Add(-time.Second))) {
		t.Fatal("the Forget is still remembered after it retired")
	}
	f.clk.BlockUntil(1)
	f.clk.Advance(30 * time.Second)
	s.await(t, evs, 0, []int64{1, 2})
	idle(f.p)
}

// A user onboarded again after the Forget is called: the new calls fire
// after it. The first such call retires the Forget (every call fired
// before it came before on the partition), whose record is committed once
// every ivr-calls record consumed before that call is.
func TestUserOnboardedAgainAfterTheForgetIsCalled(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 1})
	s := f.session(t, 0, 1<<20)
	f.p.Forget(0, "u", t0, 0)
	f.p.Mark(s, evs, 0, 1)
	if !f.consume(t, firedAt("u", "old", t0.Add(-time.Second))) {
		t.Fatal("the call fired before the Forget placed")
	}
	if f.consume(t, firedAt("u", "new", t0.Add(time.Millisecond))) {
		t.Fatal("the call of the user onboarded again dropped")
	}
	idle(f.p)
	if got := f.prov.Seen(); !slices.Equal(got, []string{"new"}) || f.p.recent.Load() != 0 {
		t.Fatalf("placed %v, %d Forgets recent", got, f.p.recent.Load())
	}
	if got := s.got(evs, 0); len(got) != 0 {
		t.Fatalf("followup-events marked %v before the dropped call was committed", got)
	}
	f.p.Mark(s, calls, 0, 1) // Goka commits the dropped call: the Forget follows
	if got := s.got(evs, 0); !slices.Equal(got, []int64{1}) {
		t.Fatalf("followup-events marked %v, want [1]", got)
	}
}

// A crash at any point: a Forget is committed only after the calls it
// dropped (so either they are not consumed again or the Forget is too),
// and a partition that comes places nothing before its followup-events
// are consumed to where they ended: a call consumed again before the
// Forget waits for it, and it drops the call.
func TestForgetAcrossACrash(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 1})
	s1 := f.session(t, 0, 1<<20)
	f.p.Forget(0, "u", t0, 0)
	if !f.consume(t, firedAt("u", "x", t0.Add(-time.Second))) || f.consume(t, firedAt("v", "y", t0.Add(time.Second))) {
		t.Fatal("x placed or y dropped")
	}
	idle(f.p)
	f.p.Mark(s1, evs, 0, 1) // Goka commits the Forget; the placer holds it: x (0) is not committed
	if got := s1.got(evs, 0); len(got) != 0 {
		t.Fatalf("followup-events marked %v before the call the Forget dropped was committed", got)
	}

	// The process dies here: x and the Forget are consumed again, x first.
	g := newFixture(t, Config{MaxInFlight: 1})
	g.session(t, 1, 2) // the Forget is still to come
	if g.consume(t, firedAt("u", "x", t0.Add(-time.Second))) || g.consume(t, firedAt("v", "y", t0.Add(time.Second))) {
		t.Fatal("dropped before the Forget came again")
	}
	part := g.p.partition(0)
	part.mu.Lock()
	waiting := len(part.waiting)
	part.mu.Unlock()
	if got := g.prov.Seen(); len(got) != 0 || waiting != 2 {
		t.Fatalf("placed %v, %d waiting, before followup-events were consumed to their end", got, waiting)
	}
	g.p.Forget(0, "u", t0, 0)
	idle(g.p)
	if got := g.prov.Seen(); !slices.Equal(got, []string{"y"}) {
		t.Fatalf("after the restart placed %v, want y only", got)
	}

	// Had it not died: x committed, the Forget follows.
	f.p.Mark(s1, calls, 0, 1)
	if got := s1.got(evs, 0); !slices.Equal(got, []int64{1}) {
		t.Fatalf("followup-events marked %v, want [1]", got)
	}
}

// A partition's calls wait for followup-events to be consumed up to where
// its claim found them: a record Goka passes over without a callback
// counts once Goka marks it.
func TestCallsWaitForTheEventsToBeConsumed(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 1})
	s := newSession()
	f.p.Begin(s)
	f.p.Claim(s, claim{topic: evs, initial: 3, high: 6}) // before the partition is restored
	st := f.open(t, 0, nil)
	defer st.Close()
	f.consume(t, call("u", "c1"))
	f.p.Event(0, 3)
	f.p.Event(0, 4)
	if got := f.prov.Seen(); len(got) != 0 {
		t.Fatalf("placed %v before followup-events were consumed", got)
	}
	f.p.Mark(s, evs, 0, 6) // 5 had no callback
	idle(f.p)
	if got := f.prov.Seen(); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("placed %v, want c1", got)
	}
}

// The per-call cost of the check: a counter's load while no Forget is
// recent; a lookup (two locks) while one is.
func BenchmarkForgotten(b *testing.B) {
	for _, recent := range []int{0, 1, 100} {
		b.Run(fmt.Sprintf("recent=%d", recent), func(b *testing.B) {
			f := newFixture(b, Config{MaxInFlight: 1})
			f.session(b, 0, 1<<40)
			for i := range recent {
				f.p.Forget(0, fmt.Sprint("gone", i), t0.Add(time.Hour), int64(i))
			}
			c := firedAt("u", "c", t0)
			for b.Loop() {
				if f.p.Forgotten(0, c) {
					b.Fatal("dropped")
				}
			}
		})
	}
}

// An expiry (a Forget with no time: the user had no call for the
// scheduler's retention) drops the user's held calls but remembers
// nothing: a mass expiry costs no memory, and its followup-events record
// is committed as soon as the ivr-calls records consumed before it are.
func TestExpiryRemembersNothing(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 1})
	s := f.session(t, 0, 1<<20)
	for i := range 1000 {
		f.p.Forget(0, fmt.Sprint("idle", i), time.Time{}, int64(i))
	}
	if n := f.p.recent.Load(); n != 0 {
		t.Fatalf("%d expiries remembered", n)
	}
	for o := int64(1); o <= 1000; o++ { // Goka commits each
		f.p.Mark(s, evs, 0, o)
	}
	for got := s.got(evs, 0); len(got) == 0 || got[len(got)-1] != 1000; got = s.got(evs, 0) {
		select {
		case <-s.marked:
		case <-time.After(10 * time.Second): // a guard, not a wait for the event
			t.Fatalf("followup-events marked up to %v, want 1000", got)
		}
	}
	if f.consume(t, firedAt("idle1", "next", t0)) {
		t.Fatal("a call after an expiry dropped")
	}
	idle(f.p)
}
