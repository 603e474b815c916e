package scheduler

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
)

// A user's value within the bound, with follow-ups fired before in its
// history, grows past the bound when the next fires are recorded (each
// fired follow-up joins the history with its call id and fire time, a
// recurring one brings its next occurrence). The wake recording them must
// not be refused: before, it was dead-lettered as state_too_large and the
// value left as it was, so the series' next occurrence was never
// scheduled and the series stopped without a word. The oldest fired
// follow-ups make room instead, and the series goes on.
func TestAFireIsRecordedWhenItWouldOverflowTheValue(t *testing.T) {
	// onboarded returns a harness of value bound bound, where u1 has three
	// follow-ups fired in its history and four pending, all due at 3 s,
	// one of them recurring.
	onboarded := func(bound int) *harness {
		h := newHarness(t, func(c *Config) { c.MaxValueBytes = bound })
		big := func(id string, d time.Duration) *pb.FollowUp {
			f := delay(id, d)
			f.Action.IvrScript = strings.Repeat("s", 3000)
			return f
		}
		h.onboard("u1", big("a1", time.Second), big("a2", time.Second), big("a3", time.Second))
		h.tickAt(time.Second)
		h.expectCalls("a1", "a2", "a3")
		r := delay("r", 2*time.Second) // the delays count from the command, at 1 s
		r.Repeat = &pb.Repeat{Every: "1m"}
		h.onboard("u1", big("b1", 2*time.Second), big("b2", 2*time.Second), big("b3", 2*time.Second), r)
		h.expectRejected("u1")
		if n := len(h.state("u1").GetFired()); n != 3 {
			t.Fatalf("%d fired in the history, want a1 to a3", n)
		}
		return h
	}
	// The bound: the value's size, with the room an Onboard leaves for the
	// next occurrence of its series, less than what recording the fires adds.
	bound := proto.Size(onboarded(1<<20).state("u1")) + nextRoom
	h := onboarded(bound)
	h.tickAt(3 * time.Second)
	h.expectCalls("b1", "b2", "b3", "r")
	h.expectRejected("u1")
	st := h.state("u1")
	if n := proto.Size(st); n > bound || len(st.GetFired()) == 0 || len(st.GetPending()) != 1 {
		t.Fatalf("value of %d bytes (bound %d), %d fired kept, pending %v", n, bound, len(st.GetFired()), st.GetPending())
	}
	h.tickAt(3*time.Second + time.Minute)
	h.expectCalls("r")
}

// An Onboard leaves room in the user's value for the next occurrences of
// its series, which trimming the fired history cannot give back: one that
// fills the value to the bound is rejected as state_too_large at once
// (before, it was accepted, and its series' first fire was refused and the
// series stopped), and one with the room fires its series on.
func TestOnboardLeavesRoomForTheNextOccurrence(t *testing.T) {
	r := delay("r", time.Second)
	r.Action.IvrScript = strings.Repeat("s", 3000)
	r.Repeat = &pb.Repeat{Every: "1m"}
	h := newHarness(t)
	h.onboard("u1", r)
	size := proto.Size(h.state("u1"))

	h = newHarness(t, func(c *Config) { c.MaxValueBytes = size })
	h.onboard("u1", r)
	h.expectRejected("u1", deadletter.ReasonStateTooLarge)

	h = newHarness(t, func(c *Config) { c.MaxValueBytes = size + nextRoom })
	h.onboard("u1", r)
	h.expectRejected("u1")
	for i := range 3 {
		h.tickAt(time.Second + time.Duration(i)*time.Minute)
		h.expectCalls("r")
		h.expectRejected("u1")
	}
}
