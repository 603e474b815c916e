package scheduler

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/topology"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type harness struct {
	t      *testing.T
	tt     *tester.Tester
	s      *Scheduler
	clk    *clock.Fake
	topics topology.Topics
	calls  *tester.QueueTracker
	events *tester.QueueTracker
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	tt := tester.New(t)
	clk := clock.NewFake(t0)
	topics := topology.NewTopics("")
	s, err := New(Config{
		Topics:  topics,
		Storage: tt.StorageBuilder(),
		Clock:   clk,
		Default: DefaultFollowUp{Delay: time.Minute},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	proc, err := s.Processor(nil, goka.WithTester(tt))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("processor: %v", err)
		}
	})
	return &harness{t: t, tt: tt, s: s, clk: clk, topics: topics,
		calls: tt.NewQueueTracker(string(topics.Calls)), events: tt.NewQueueTracker(string(topics.Events))}
}

func delay(id string, d time.Duration) *pb.FollowUp {
	return &pb.FollowUp{TaskId: id, When: &pb.FollowUp_Delay{Delay: durationpb.New(d)}, Action: &pb.Action{IvrScript: "s-" + id}}
}

func at(id string, due time.Time) *pb.FollowUp {
	return &pb.FollowUp{TaskId: id, When: &pb.FollowUp_DueAt{DueAt: timestamppb.New(due)}}
}

func (h *harness) send(user string, cmd *pb.Command) {
	h.t.Helper()
	if cmd.RequestedAt == nil {
		cmd.RequestedAt = timestamppb.New(h.clk.Now())
	}
	h.tt.Consume(string(h.topics.Onboarding), user, cmd, tester.WithTime(h.clk.Now()))
}

func (h *harness) onboard(user string, f ...*pb.FollowUp) {
	h.send(user, &pb.Command{UserId: user, Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345678", TimeZone: "Europe/Berlin", FollowUps: f}}})
}

func (h *harness) cancel(user, task string) {
	h.send(user, &pb.Command{UserId: user, Command: &pb.Command_Cancel{Cancel: &pb.Cancel{TaskId: task}}})
}

func (h *harness) reschedule(user, task string, d time.Duration) {
	h.send(user, &pb.Command{UserId: user, Command: &pb.Command_Reschedule{Reschedule: &pb.Reschedule{TaskId: task, When: &pb.Reschedule_Delay{Delay: durationpb.New(d)}}}})
}

// tickAt moves the clock to t0+d and processes a tick.
func (h *harness) tickAt(d time.Duration) {
	h.t.Helper()
	h.clk.Set(t0.Add(d))
	h.tt.Consume(string(h.topics.Ticks), "tick-0", &pb.Tick{Partition: 0, SentAt: timestamppb.New(h.clk.Now())})
}

// nextCalls drains the calls published since the last call.
func (h *harness) nextCalls() []*pb.IVRCall {
	var out []*pb.IVRCall
	for {
		_, v, ok := h.calls.Next()
		if !ok {
			return out
		}
		out = append(out, v.(*pb.IVRCall))
	}
}

func (h *harness) nextEvents() []*pb.ScheduleEvent {
	var out []*pb.ScheduleEvent
	for {
		_, v, ok := h.events.Next()
		if !ok {
			return out
		}
		out = append(out, v.(*pb.ScheduleEvent))
	}
}

func (h *harness) state(user string) *pb.UserState {
	v := h.tt.TableValue(h.topics.SchedulerTable(), user)
	if v == nil {
		return nil
	}
	return v.(*pb.UserState)
}

func (h *harness) expectCalls(want ...string) []*pb.IVRCall {
	h.t.Helper()
	got := h.nextCalls()
	if len(got) != len(want) {
		h.t.Fatalf("got %d calls %v, want tasks %v", len(got), got, want)
	}
	for i, c := range got {
		if c.GetTaskId() != want[i] {
			h.t.Fatalf("call %d is task %q, want %q", i, c.GetTaskId(), want[i])
		}
		if c.GetFiredAt().AsTime().Before(c.GetDueAt().AsTime()) {
			h.t.Fatalf("call %s fired early: fired %v, due %v", c.GetTaskId(), c.GetFiredAt().AsTime(), c.GetDueAt().AsTime())
		}
	}
	return got
}

func TestFiresAtDueTimeNeverEarly(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("t1", 10*time.Second))

	h.tickAt(10*time.Second - time.Nanosecond)
	h.expectCalls()

	h.tickAt(10 * time.Second)
	c := h.expectCalls("t1")[0]
	if !c.GetDueAt().AsTime().Equal(t0.Add(10*time.Second)) || !c.GetFiredAt().AsTime().Equal(t0.Add(10*time.Second)) {
		t.Fatalf("due %v fired %v, want both t0+10s", c.GetDueAt().AsTime(), c.GetFiredAt().AsTime())
	}
	if c.GetUserId() != "u1" || c.GetPhone() != "+4915112345678" || c.GetTimeZone() != "Europe/Berlin" || c.GetAttempt() != 1 || c.GetAction().GetIvrScript() != "s-t1" {
		t.Fatalf("call fields: %v", c)
	}
	if c.GetCallId() != CallID("u1", &pb.Task{TaskId: "t1", DueAt: c.GetDueAt(), Attempt: 1}) {
		t.Fatalf("call id %q is not deterministic", c.GetCallId())
	}
	st := h.state("u1")
	if len(st.GetPending()) != 0 || len(st.GetFired()) != 1 || st.GetFired()[0].GetCallId() != c.GetCallId() {
		t.Fatalf("state after fire: %v", st)
	}

	h.tickAt(20 * time.Second)
	h.expectCalls()
}

func TestSeveralFollowUpsPerUser(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("c", 30*time.Second), delay("a", 10*time.Second), delay("b", 20*time.Second))
	h.onboard("u2", delay("a", 10*time.Second))
	if p := h.s.Punctuator().Index(0).Pending(); len(p) != 2 || !p["u1"].Equal(t0.Add(10*time.Second)) {
		t.Fatalf("index %v", p)
	}

	h.tickAt(10 * time.Second)
	calls := h.expectCalls("a", "a")
	if calls[0].GetUserId() == calls[1].GetUserId() {
		t.Fatalf("both calls for %s", calls[0].GetUserId())
	}
	h.tickAt(25 * time.Second)
	h.expectCalls("b")
	h.tickAt(35 * time.Second)
	h.expectCalls("c")
	if n := h.s.Punctuator().Index(0).Len(); n != 0 {
		t.Fatalf("index holds %d users after all fired", n)
	}
}

func TestFiresEverythingDueInOneTick(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", time.Second), delay("b", 2*time.Second))
	h.tickAt(5 * time.Second)
	h.expectCalls("a", "b")
}

func TestCancelBeforeFireWins(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", 10*time.Second), delay("b", 10*time.Second))
	h.cancel("u1", "a")
	ev := h.nextEvents()
	if len(ev) != 1 || ev[0].GetKind() != pb.ScheduleEvent_KIND_CANCELLED || ev[0].GetTaskId() != "a" {
		t.Fatalf("events %v", ev)
	}
	h.tickAt(time.Minute)
	h.expectCalls("b")
}

func TestCancelAfterFireIsTooLate(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", 10*time.Second))
	h.tickAt(10 * time.Second)
	call := h.expectCalls("a")[0]
	h.cancel("u1", "a")
	ev := h.nextEvents()
	if len(ev) != 1 || ev[0].GetKind() != pb.ScheduleEvent_KIND_TOO_LATE || ev[0].GetCallId() != call.GetCallId() {
		t.Fatalf("events %v", ev)
	}
}

func TestCancelUnknownTaskIsReported(t *testing.T) {
	h := newHarness(t)
	h.cancel("nobody", "x")
	ev := h.nextEvents()
	if len(ev) != 1 || ev[0].GetKind() != pb.ScheduleEvent_KIND_UNKNOWN_TASK {
		t.Fatalf("events %v", ev)
	}
	if h.state("nobody") != nil {
		t.Fatal("a cancel for an unknown user created state")
	}
}

func TestCancelAll(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", 10*time.Second), delay("b", 20*time.Second))
	h.cancel("u1", "")
	if ev := h.nextEvents(); len(ev) != 2 {
		t.Fatalf("events %v", ev)
	}
	h.tickAt(time.Minute)
	h.expectCalls()
	if h.s.Punctuator().Index(0).Len() != 0 {
		t.Fatal("index still holds the user")
	}
}

func TestRescheduleEarlierAndLater(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("early", time.Minute), delay("late", 5*time.Second))
	h.reschedule("u1", "early", 5*time.Second)
	h.reschedule("u1", "late", 2*time.Minute)
	if ev := h.nextEvents(); len(ev) != 2 || ev[0].GetKind() != pb.ScheduleEvent_KIND_RESCHEDULED {
		t.Fatalf("events %v", ev)
	}
	h.tickAt(5 * time.Second)
	c := h.expectCalls("early")[0]
	if !c.GetDueAt().AsTime().Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("due %v", c.GetDueAt().AsTime())
	}
	h.tickAt(time.Minute)
	h.expectCalls()
	h.tickAt(2 * time.Minute)
	h.expectCalls("late")
	h.reschedule("u1", "late", time.Hour)
	if ev := h.nextEvents(); len(ev) != 1 || ev[0].GetKind() != pb.ScheduleEvent_KIND_TOO_LATE {
		t.Fatalf("events %v", ev)
	}
}

func TestPastDueFiresAtOnce(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", at("old", t0.Add(-time.Hour)))
	h.tickAt(0)
	c := h.expectCalls("old")[0]
	if !c.GetDueAt().AsTime().Equal(t0.Add(-time.Hour)) {
		t.Fatalf("due %v, want the given past time", c.GetDueAt().AsTime())
	}
}

func TestDefaultFollowUp(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1")
	st := h.state("u1")
	if len(st.GetPending()) != 1 || st.GetPending()[0].GetTaskId() != "followup-1" || !st.GetPending()[0].GetDueAt().AsTime().Equal(t0.Add(time.Minute)) {
		t.Fatalf("state %v", st)
	}
}

func TestOnboardUpsertsByTaskID(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", time.Minute), delay("b", time.Minute))
	h.onboard("u1", delay("a", 2*time.Minute))
	st := h.state("u1")
	if len(st.GetPending()) != 2 || st.GetPending()[0].GetTaskId() != "b" || !st.GetPending()[1].GetDueAt().AsTime().Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("state %v", st)
	}
}

func TestDuplicateFireMessagesFireOnce(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", time.Second))
	h.clk.Set(t0.Add(time.Second))
	loop := string(h.topics.SchedulerLoop())
	h.tt.Consume(loop, "u1", &pb.Fire{})
	h.tt.Consume(loop, "u1", &pb.Fire{})
	h.expectCalls("a")
	h.tickAt(2 * time.Second)
	h.expectCalls()
}

func TestEarlyFireMessageFiresNothing(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", time.Minute))
	h.clk.Set(t0.Add(time.Minute - time.Nanosecond))
	h.tt.Consume(string(h.topics.SchedulerLoop()), "u1", &pb.Fire{DueAt: timestamppb.New(t0)})
	h.expectCalls()
	if len(h.state("u1").GetPending()) != 1 {
		t.Fatal("pending follow-up lost")
	}
}

func TestBadCommandsAreSkipped(t *testing.T) {
	h := newHarness(t)
	topic := string(h.topics.Onboarding)
	h.tt.Consume(topic, "u1", &codec.Undecodable{Data: []byte{0xff, 0xff, 0xff}})
	h.send("u1", &pb.Command{UserId: "u2", Command: &pb.Command_Cancel{Cancel: &pb.Cancel{}}})
	h.send("u1", &pb.Command{UserId: "u1"})
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "0151-123"}}})
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345678", TimeZone: "Mars/Olympus"}}})
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345678", FollowUps: []*pb.FollowUp{delay("a", -time.Second)}}}})
	if got := h.s.Stats.Invalid.Load(); got != 6 {
		t.Fatalf("invalid %d, want 6", got)
	}
	if h.state("u1") != nil {
		t.Fatal("a rejected command wrote state")
	}
	h.onboard("u1", delay("a", time.Second))
	h.tickAt(time.Second)
	h.expectCalls("a")
}

func TestValidateReasons(t *testing.T) {
	onb := func(o *pb.Onboard) *pb.Command {
		return &pb.Command{UserId: "u", Command: &pb.Command_Onboard{Onboard: o}}
	}
	cases := []struct {
		key  string
		cmd  *pb.Command
		want Reason
	}{
		{"", &pb.Command{}, ReasonMissingUserID},
		{"a", &pb.Command{UserId: "b"}, ReasonKeyMismatch},
		{"u", &pb.Command{UserId: "u"}, ReasonUnknownCommand},
		{"u", onb(&pb.Onboard{Phone: "+0123"}), ReasonInvalidPhone},
		{"u", onb(&pb.Onboard{TimeZone: "Nowhere/City"}), ReasonUnknownTimeZone},
		{"u", onb(&pb.Onboard{FollowUps: []*pb.FollowUp{delay("x", -1)}}), ReasonNegativeDelay},
		{"u", onb(&pb.Onboard{FollowUps: []*pb.FollowUp{delay("x", 1), delay("x", 2)}}), ReasonDuplicateTaskID},
		{"u", &pb.Command{UserId: "u", Command: &pb.Command_Reschedule{Reschedule: &pb.Reschedule{}}}, ReasonMissingTaskID},
		{"u", &pb.Command{UserId: "u", Command: &pb.Command_Reschedule{Reschedule: &pb.Reschedule{TaskId: "x"}}}, ReasonMissingWhen},
	}
	for _, c := range cases {
		_, err := Validate(c.key, c.cmd)
		re, ok := err.(*RejectError)
		if !ok || re.Reason != c.want {
			t.Errorf("Validate(%q, %v) = %v, want reason %s", c.key, c.cmd, err, c.want)
		}
	}
	if u, err := Validate("u", onb(&pb.Onboard{Phone: "+14155550123", TimeZone: "America/Los_Angeles", FollowUps: []*pb.FollowUp{delay("x", time.Hour)}})); err != nil || u != "u" {
		t.Fatalf("valid command rejected: %v", err)
	}
}
