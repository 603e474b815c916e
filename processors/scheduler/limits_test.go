package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
)

// withLimits sets the command limits (the defaults, changed by set).
func withLimits(set func(*Limits)) func(*Config) {
	return func(c *Config) {
		c.Limits = DefaultLimits()
		set(&c.Limits)
	}
}

// many returns n follow-ups with empty payloads, ids prefix-1 to prefix-n.
func many(prefix string, n int) []*pb.FollowUp {
	f := make([]*pb.FollowUp, n)
	for i := range f {
		f[i] = delay(fmt.Sprintf("%s-%d", prefix, i+1), time.Hour)
		f[i].Action = nil
	}
	return f
}

// expectRejected checks that the only dead letters since the last look are
// one per reason given, keyed by user.
func (h *harness) expectRejected(user string, reasons ...deadletter.Reason) []*pb.DeadLetter {
	h.t.Helper()
	dls := h.deadLetters()
	if len(dls) != len(reasons) {
		h.t.Fatalf("%d dead letters %v, want reasons %v", len(dls), dls, reasons)
	}
	for i, dl := range dls {
		if dl.GetReason() != string(reasons[i]) || string(dl.GetKey()) != user || dl.GetDetail() == "" {
			h.t.Fatalf("dead letter %d: reason %q key %q detail %q, want reason %s for %s", i, dl.GetReason(), dl.GetKey(), dl.GetDetail(), reasons[i], user)
		}
	}
	return dls
}

// The security review's reproduction: two onboard commands for one user,
// each with 16,000 follow-ups of empty payload, caps raised out of the way.
// The first fits; the second would make the user's value larger than a
// record may be (before the fix the value was written, and the table
// write failed at the producer, again at every restart). It goes to the
// dead-letter topic as state_too_large, the user's value stays as the first
// command left it, and the partition goes on with the next user.
func TestOversizedStateIsDeadLettered(t *testing.T) {
	h := newHarness(t, withLimits(func(l *Limits) { l.MaxFollowUps, l.MaxPending = 20000, 40000 }))
	h.onboard("u1", many("first", 16000)...)
	h.expectRejected("u1")
	before, err := proto.Marshal(h.state("u1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(before) >= 1<<20 || len(h.state("u1").GetPending()) != 16000 {
		t.Fatalf("first command: %d pending, %d bytes", len(h.state("u1").GetPending()), len(before))
	}
	h.onboard("u1", many("second", 16000)...)
	dls := h.expectRejected("u1", deadletter.ReasonStateTooLarge)
	var back pb.Command
	if err := proto.Unmarshal(dls[0].GetValue(), &back); err != nil || len(back.GetOnboard().GetFollowUps()) != 16000 {
		t.Fatalf("the rejected command is not kept whole in its dead letter: %v", err)
	}
	after, err := proto.Marshal(h.state("u1"))
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Fatalf("the user's value changed: %d bytes, was %d", len(after), len(before))
	}
	h.onboard("u2", delay("a", time.Second))
	h.expectRejected("u2")
	h.tickAt(time.Second)
	h.expectCalls("a")
}

// A command with more follow-ups than MaxFollowUps, or one that would leave
// a user more than MaxPending pending, is dead-lettered; the user's value
// is left as it was. Follow-ups that replace pending ones (same task id)
// do not count twice.
func TestFollowUpCaps(t *testing.T) {
	h := newHarness(t, withLimits(func(l *Limits) { l.MaxFollowUps, l.MaxPending = 3, 4 }))
	h.onboard("u1", many("a", 4)...)
	h.expectRejected("u1", deadletter.ReasonTooManyFollowUps)
	if h.state("u1") != nil {
		t.Fatal("a rejected command wrote the user's value")
	}
	h.onboard("u1", many("a", 3)...)
	h.onboard("u1", many("a", 3)...) // the same three again: upserted
	h.onboard("u1", many("b", 1)...)
	h.expectRejected("u1")
	h.onboard("u1", many("c", 1)...)
	h.expectRejected("u1", deadletter.ReasonTooManyPending)
	if n := len(h.state("u1").GetPending()); n != 4 {
		t.Fatalf("%d pending, want the 4 accepted", n)
	}
	// What Validate checks, the CLI checks before it produces.
	cmd := &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345678", FollowUps: many("a", 4)}}}
	if _, _, err := Validate("u1", cmd, t0, h.s.cfg.Limits); !isReason(err, deadletter.ReasonTooManyFollowUps) {
		t.Fatalf("Validate: %v", err)
	}
}

func isReason(err error, r deadletter.Reason) bool {
	re, ok := err.(*RejectError)
	return ok && re.Reason == r
}

// Ids, scripts and campaign ids longer than their bounds are rejected, in
// every command that carries them.
func TestLengthBounds(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	onboard := func(user string, f ...*pb.FollowUp) *pb.Command {
		return &pb.Command{UserId: user, Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345678", FollowUps: f}}}
	}
	withAction := func(a *pb.Action) *pb.FollowUp {
		f := delay("a", time.Hour)
		f.Action = a
		return f
	}
	ok := []*pb.Command{
		onboard(long(codec.MaxIDBytes), delay(long(codec.MaxIDBytes), time.Hour)),
		onboard("u1", withAction(&pb.Action{IvrScript: long(MaxScriptBytes), CampaignId: long(codec.MaxIDBytes)})),
	}
	bad := []*pb.Command{
		onboard(long(codec.MaxIDBytes + 1)),
		onboard("u1", delay(long(codec.MaxIDBytes+1), time.Hour)),
		onboard("u1", withAction(&pb.Action{IvrScript: long(MaxScriptBytes + 1)})),
		onboard("u1", withAction(&pb.Action{CampaignId: long(codec.MaxIDBytes + 1)})),
		{UserId: "u1", Command: &pb.Command_Cancel{Cancel: &pb.Cancel{TaskId: long(codec.MaxIDBytes + 1)}}},
		{UserId: "u1", Command: &pb.Command_RunNow{RunNow: &pb.RunNow{TaskId: long(codec.MaxIDBytes + 1)}}},
		{UserId: "u1", Command: &pb.Command_Reschedule{Reschedule: &pb.Reschedule{TaskId: long(codec.MaxIDBytes + 1), When: &pb.Reschedule_Delay{}}}},
		{UserId: "u1", Command: &pb.Command_CallEnded{CallEnded: &pb.CallEnded{TaskId: "a", CallId: long(codec.MaxIDBytes + 1), Attempt: 1, Outcome: pb.Outcome_OUTCOME_ANSWERED}}},
	}
	for i, cmd := range ok {
		if _, _, err := Validate(cmd.GetUserId(), cmd, t0, DefaultLimits()); err != nil {
			t.Errorf("command %d at the bounds: %v", i, err)
		}
	}
	for i, cmd := range bad {
		if _, _, err := Validate(cmd.GetUserId(), cmd, t0, DefaultLimits()); !isReason(err, deadletter.ReasonTooLong) {
			t.Errorf("command %d: %v, want %s", i, err, deadletter.ReasonTooLong)
		}
	}
	// The processor dead-letters them.
	h := newHarness(t)
	// An over-long key is too long before it is a mismatch (whose detail
	// quotes it whole).
	forget := &pb.Command{UserId: "u1", Command: &pb.Command_Forget{Forget: &pb.Forget{}}}
	if _, _, err := Validate(long(codec.MaxIDBytes+1), forget, t0, DefaultLimits()); !isReason(err, deadletter.ReasonTooLong) {
		t.Errorf("a Forget under a long key: %v, want %s", err, deadletter.ReasonTooLong)
	}
	h.send("u1", bad[2])
	h.expectRejected("u1", deadletter.ReasonTooLong)
	if h.state("u1") != nil {
		t.Fatal("a rejected command wrote the user's value")
	}
}
