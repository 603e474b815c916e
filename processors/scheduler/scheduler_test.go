package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/lovoo/goka/tester"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
	"github.com/ivrsched/ivrsched/topology"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type harness struct {
	done   chan error // the processor's Run result
	failed bool       // the test expects the processor to fail
	t      *testing.T
	tt     *tester.Tester
	s      *Scheduler
	clk    *clock.Fake
	topics topology.Topics
	calls  *tester.QueueTracker
	events *tester.QueueTracker
	dlq    *tester.QueueTracker
}

func newHarness(t *testing.T, opts ...func(*Config)) *harness {
	t.Helper()
	tt := tester.New(t)
	clk := clock.NewFake(t0)
	topics := topology.NewTopics("")
	cfg := Config{
		Topics:  topics,
		Storage: withDueOrder(tt.StorageBuilder(), string(topics.SchedulerTable())),
		Clock:   clk,
		Default: DefaultFollowUp{Delay: time.Minute},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	proc, err := s.Processor(nil, goka.WithTester(tt), goka.WithProducerBuilder(kafkatest.SizedProducer(tt.ProducerBuilder(), sarama.NewConfig().Producer.MaxMessageBytes)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	h := &harness{done: done, t: t, tt: tt, s: s, clk: clk, topics: topics,
		calls: tt.NewQueueTracker(string(topics.Calls)), events: tt.NewQueueTracker(string(topics.Events)),
		dlq: tt.NewQueueTracker(string(topics.SchedulerDLQ))}
	t.Cleanup(func() {
		cancel()
		if h.failed {
			return
		}
		if err := <-done; err != nil {
			t.Errorf("processor: %v", err)
		}
	})
	return h
}

// expectFailure waits for the processor to stop with an error containing want.
func (h *harness) expectFailure(want string) {
	h.t.Helper()
	h.failed = true
	select {
	case err := <-h.done:
		if err == nil || !strings.Contains(err.Error(), want) {
			h.t.Fatalf("processor stopped with %v, want an error containing %q", err, want)
		}
	case <-time.After(10 * time.Second):
		h.t.Fatal("processor did not fail")
	}
}

// faultyStore fails reads of one key while armed.
type faultyStore struct {
	storage.Storage
	key   string
	armed atomic.Bool
}

func (f *faultyStore) Get(key string) ([]byte, error) {
	if key == f.key && f.armed.Load() {
		return nil, errors.New("injected read fault")
	}
	return f.Storage.Get(key)
}

// withFaultyTable puts the scheduler table's store of partition 0 behind f.
func withFaultyTable(f *faultyStore) func(*Config) {
	return func(c *Config) {
		inner, table := c.Storage, string(c.Topics.SchedulerTable())
		c.Storage = func(topic string, part int32) (storage.Storage, error) {
			st, err := inner(topic, part)
			if err != nil || topic != table {
				return st, err
			}
			f.Storage = st
			return f, nil
		}
	}
}

// A tick that cannot read a due follow-up's user fails the partition: no
// call, and the mark stays before the follow-up, so the restarted partition
// fires it (before the fix, the error was logged and the mark moved on).
func TestTickStoreFaultFailsThePartition(t *testing.T) {
	f := &faultyStore{key: "u2"}
	h := newHarness(t, withFaultyTable(f))
	h.onboard("u1", delay("a", time.Second))
	h.onboard("u2", delay("a", 2*time.Second))
	h.tickAt(time.Second)
	h.expectCalls("a")
	f.armed.Store(true)
	h.clk.Set(t0.Add(2 * time.Second))
	h.tt.Consume(string(h.topics.Ticks), tickKey, &pb.Tick{})
	h.expectFailure("injected read fault")
	if m := f.value(t, tickKey).GetFiredThrough().GetThrough(); m.GetUserId() != "u1" {
		t.Fatalf("mark %v moved past the follow-up that could not fire", m)
	}
	h.expectCalls()
}

// value reads a table value from the store (the tester's own reads wait
// for a processor that has stopped).
func (f *faultyStore) value(t *testing.T, key string) *pb.UserState {
	t.Helper()
	raw, err := f.Storage.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	if raw == nil {
		return nil
	}
	st := &pb.UserState{}
	if err := proto.Unmarshal(raw, st); err != nil {
		t.Fatal(err)
	}
	return st
}

// A follow-up the index holds but its user's value does not fails the
// partition rather than being skipped.
func TestTickMissingFollowUpFailsThePartition(t *testing.T) {
	f := &faultyStore{}
	h := newHarness(t, withFaultyTable(f))
	h.onboard("u1", delay("a", time.Second))
	// The index learns of a follow-up the stored value lacks (as a bug or a
	// store out of step would show it).
	h.s.Punctuator().Index(0).Update("u1", nil, &dueindex.Value{Pending: []dueindex.Task{{Due: t0.Add(time.Second).UnixNano(), ID: "ghost"}}})
	h.tickAt(time.Second)
	h.expectFailure("is in the due index but not in the user's value")
	if m := f.value(t, tickKey); m != nil {
		t.Fatalf("mark written: %v", m)
	}
}

// A due follow-up whose user's stored value does not decode cannot be called
// (there is no phone to call); it goes to the dead-letter topic with the
// stored bytes, and the partition goes on firing the others.
func TestTickUnreadableValueIsDeadLettered(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", time.Second))
	h.onboard("u2", delay("a", time.Second))
	// Corrupt u2's value without a write the index sees: the tester's
	// SetTableValue writes the store directly.
	bad := []byte{0x0a, 0x02, 0xff, 0xfe}
	h.tt.SetTableValue(h.topics.SchedulerTable(), "u2", &codec.Undecodable{Data: bad})
	h.tickAt(time.Second)
	c := h.expectCalls("a")
	if c[0].GetUserId() != "u1" {
		t.Fatalf("call for %s", c[0].GetUserId())
	}
	dls := h.deadLetters()
	if len(dls) != 1 || dls[0].GetReason() != string(deadletter.ReasonUnreadableState) || string(dls[0].GetKey()) != "u2" ||
		string(dls[0].GetValue()) != string(bad) || dls[0].GetSourceTopic() != string(h.topics.Ticks) {
		t.Fatalf("dead letters %v", dls)
	}
	if h.s.Stats.Unreadable.Load() != 1 {
		t.Fatalf("unreadable count %d", h.s.Stats.Unreadable.Load())
	}
}

func delay(id string, d time.Duration) *pb.FollowUp {
	return &pb.FollowUp{TaskId: id, When: &pb.FollowUp_Delay{Delay: durationpb.New(d)}, Action: &pb.Action{IvrScript: "s-" + id}}
}

func at(id string, due time.Time) *pb.FollowUp {
	return &pb.FollowUp{TaskId: id, When: &pb.FollowUp_DueAt{DueAt: timestamppb.New(due)}}
}

// send consumes cmd as a record timestamped now (or as opts say).
func (h *harness) send(user string, cmd *pb.Command, opts ...tester.EmitOption) {
	h.t.Helper()
	h.tt.Consume(string(h.topics.Onboarding), user, cmd, append([]tester.EmitOption{tester.WithTime(h.clk.Now())}, opts...)...)
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
	h.tt.Consume(string(h.topics.Ticks), tickKey, &pb.Tick{Partition: 0, SentAt: timestamppb.New(h.clk.Now())})
}

// tickKey is the tester's one partition's tick key, which holds its mark.
var tickKey = topology.TickKeys(1)[0]

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
	// The tick wrote the partition's mark, not the user's value.
	if m := h.state(tickKey).GetFiredThrough().GetThrough(); m.GetUserId() != "u1" || m.GetTaskId() != "t1" || !m.GetDueAt().AsTime().Equal(t0.Add(10*time.Second)) {
		t.Fatalf("mark after fire: %v", h.state(tickKey))
	}
	st := h.state("u1")
	if len(st.GetPending()) != 1 || len(st.GetFired()) != 0 {
		t.Fatalf("user state after fire: %v", st)
	}
	// The query page shows it as the next command will record it.
	if v := h.s.Settled(st); len(v.GetPending()) != 0 || len(v.GetFired()) != 1 || v.GetFired()[0].GetCallId() != c.GetCallId() || len(st.GetPending()) != 1 {
		t.Fatalf("settled view %v of %v", v, st)
	}

	h.tickAt(20 * time.Second)
	h.expectCalls()
}

// The user's next command records what the ticks fired.
func TestCommandRecordsFiredFollowUps(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", 10*time.Second))
	h.tickAt(10 * time.Second)
	c := h.expectCalls("a")[0]
	h.onboard("u1", delay("b", time.Minute))
	st := h.state("u1")
	if len(st.GetPending()) != 1 || st.GetPending()[0].GetTaskId() != "b" ||
		len(st.GetFired()) != 1 || st.GetFired()[0].GetCallId() != c.GetCallId() || st.GetFired()[0].GetFiredAt() != nil {
		t.Fatalf("state %v", st)
	}
	h.tickAt(time.Minute + 10*time.Second)
	h.expectCalls("b")
}

// A follow-up scheduled at or before the partition's mark is never seen by a
// tick, so the command fires it; one after the mark waits for a tick.
func TestFollowUpBeforeTheMarkFiresAtOnce(t *testing.T) {
	h := newHarness(t)
	h.onboard("u5", delay("a", 10*time.Second))
	h.tickAt(10 * time.Second)
	h.expectCalls("a")
	h.onboard("u1", at("past", t0.Add(5*time.Second)), at("tie-before", t0.Add(10*time.Second)), at("later", t0.Add(time.Hour)))
	h.onboard("u9", at("tie-after", t0.Add(10*time.Second)))
	calls := h.expectCalls("past", "tie-before")
	if !calls[0].GetFiredAt().AsTime().Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("fired at %v", calls[0].GetFiredAt().AsTime())
	}
	if st := h.state("u1"); len(st.GetPending()) != 1 || len(st.GetFired()) != 2 || st.GetFired()[0].GetFiredAt() == nil {
		t.Fatalf("state %v", st)
	}
	h.tickAt(10 * time.Second)
	h.expectCalls("tie-after")
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Reschedule{Reschedule: &pb.Reschedule{TaskId: "later",
		When: &pb.Reschedule_DueAt{DueAt: timestamppb.New(t0.Add(9 * time.Second))}}}}) // to before the mark
	h.expectCalls("later")
	h.tickAt(2 * time.Hour)
	h.expectCalls()
}

func TestSeveralFollowUpsPerUser(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("c", 30*time.Second), delay("a", 10*time.Second), delay("b", 20*time.Second))
	h.onboard("u2", delay("a", 10*time.Second))
	if p := h.s.Punctuator().Index(0).Pending(); len(p) != 4 || p[0].User != "u1" || p[0].Task != "a" || !p[0].Time().Equal(t0.Add(10*time.Second)) || p[1].User != "u2" {
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
	if n := len(h.s.Punctuator().Index(0).Pending()); n != 0 {
		t.Fatalf("index holds %d follow-ups after all fired", n)
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
	if len(h.s.Punctuator().Index(0).Pending()) != 0 {
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

// A command whose follow-up lands at or before the mark but is not yet due
// by this host's clock (a clock behind the one that moved the mark, as after
// a rebalance, or stepped back) does not fire early: it is held, and a tick
// fires it through the loop when this clock reaches it. Before, it fired at
// once, early by the skew.
func TestNoEarlyFireThroughTheMarkWhenTheClockStepsBack(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", 10*time.Second))
	h.tickAt(10 * time.Second)
	h.expectCalls("a")

	h.clk.Jump(t0.Add(5 * time.Second))
	h.send("u2", &pb.Command{UserId: "u2", RequestedAt: timestamppb.New(t0.Add(5 * time.Second)), Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
		Phone: "+4915112345678", FollowUps: []*pb.FollowUp{at("b", t0.Add(8*time.Second))}}}})
	h.expectCalls()
	if st := h.state("u2"); len(st.GetPending()) != 1 || !st.GetPending()[0].GetHeld() {
		t.Fatalf("state %v, want the follow-up held", st)
	}
	if tm := h.s.Punctuator().Index(0).Timers(); len(tm) != 1 || tm[0].User != "u2" {
		t.Fatalf("timers %v", tm)
	}
	h.tickAt(7 * time.Second)
	h.expectCalls()
	h.tickAt(8 * time.Second)
	c := h.expectCalls("b")[0]
	if !c.GetFiredAt().AsTime().Equal(t0.Add(8 * time.Second)) {
		t.Fatalf("fired at %v, want t0+8s", c.GetFiredAt().AsTime())
	}
	st := h.state("u2")
	if len(st.GetPending()) != 0 || len(st.GetFired()) != 1 || st.GetFired()[0].GetCallId() != c.GetCallId() {
		t.Fatalf("state after the held fire %v", st)
	}
	h.tickAt(20 * time.Second)
	h.expectCalls()

	// Due by this clock: fires at once from the command, as before.
	h.onboard("u3", at("c", t0.Add(9*time.Second)))
	h.expectCalls("c")
}

// Retention removes a user with nothing pending once the last due time and
// the last command are older than Retain: a tombstone and KIND_EXPIRED. A
// user still active is kept, and so is one with a follow-up pending.
func TestRetentionRemovesIdleUsers(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Retain = 24 * time.Hour })
	h.onboard("idle", delay("a", 10*time.Second))
	h.onboard("busy", delay("a", 10*time.Second), delay("b", 30*time.Hour))
	h.tickAt(10 * time.Second)
	h.expectCalls("a", "a")
	h.clk.Set(t0.Add(time.Hour))
	h.onboard("later", delay("a", time.Second)) // active an hour later
	h.tickAt(time.Hour + time.Second)
	h.expectCalls("a")
	h.nextEvents()

	h.tickAt(24*time.Hour + 10*time.Second)
	h.tickAt(24*time.Hour + 11*time.Second) // the wake is processed
	if v := h.tt.TableValue(h.topics.SchedulerTable(), "idle"); v != nil {
		t.Fatalf("idle user kept: %v", v)
	}
	ev := h.nextEvents()
	if len(ev) != 1 || ev[0].GetKind() != pb.ScheduleEvent_KIND_EXPIRED || ev[0].GetUserId() != "idle" {
		t.Fatalf("events %v", ev)
	}
	if h.state("busy") == nil || h.state("later") == nil {
		t.Fatal("an active user was removed")
	}
	h.tickAt(25*time.Hour + 2*time.Second)
	h.tickAt(25*time.Hour + 3*time.Second)
	if v := h.tt.TableValue(h.topics.SchedulerTable(), "later"); v != nil {
		t.Fatalf("user idle for a day kept: %v", v)
	}
	h.tickAt(30*time.Hour + time.Second)
	h.expectCalls("b")
	h.tickAt(54 * time.Hour)
	h.tickAt(54*time.Hour + time.Second)
	if v := h.tt.TableValue(h.topics.SchedulerTable(), "busy"); v != nil {
		t.Fatalf("user idle for a day after its last call kept: %v", v)
	}
	if n := h.s.Stats.Expired.Load(); n != 3 {
		t.Fatalf("expired %d, want 3", n)
	}
}

// Forget erases the user: nothing pending fires, the value is deleted, and
// KIND_FORGOTTEN is reported; a later Onboard starts afresh. An unreadable
// value is erased too.
func TestForgetErasesTheUser(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", time.Second), delay("b", time.Hour))
	h.tickAt(time.Second)
	h.expectCalls("a")
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Forget{Forget: &pb.Forget{}}})
	if v := h.tt.TableValue(h.topics.SchedulerTable(), "u1"); v != nil {
		t.Fatalf("value after forget: %v", v)
	}
	ev := h.nextEvents()
	if len(ev) != 1 || ev[0].GetKind() != pb.ScheduleEvent_KIND_FORGOTTEN || ev[0].GetUserId() != "u1" {
		t.Fatalf("events %v", ev)
	}
	h.tickAt(2 * time.Hour)
	h.expectCalls()

	h.tt.SetTableValue(h.topics.SchedulerTable(), "u2", &codec.Undecodable{Data: []byte{0x0a, 0x01, 0xff}})
	h.send("u2", &pb.Command{UserId: "u2", Command: &pb.Command_Forget{Forget: &pb.Forget{}}})
	if v := h.tt.TableValue(h.topics.SchedulerTable(), "u2"); v != nil {
		t.Fatalf("unreadable value after forget: %v", v)
	}
	h.clk.Set(t0.Add(3 * time.Hour))
	h.onboard("u1")
	if st := h.state("u1"); len(st.GetPending()) != 1 || st.GetPending()[0].GetTaskId() != "followup-1" || len(st.GetFired()) != 0 {
		t.Fatalf("state after onboarding again: %v", st)
	}
}

// A producer cannot bend time: requested_at far from the record timestamp,
// and due times outside what the index can represent, are dead-lettered.
// Before the bounds, a due time in 2300 wrapped to 1715 and fired at once.
func TestForgedTimesAreRejected(t *testing.T) {
	h := newHarness(t)
	y2300 := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	cmd := func(req time.Time, f *pb.FollowUp) *pb.Command {
		return &pb.Command{UserId: "u1", RequestedAt: timestamppb.New(req), Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+14155550123", FollowUps: []*pb.FollowUp{f}}}}
	}
	h.send("u1", cmd(y2300, at("a", y2300)))                           // forged requested_at
	h.send("u1", cmd(t0.Add(48*time.Hour), delay("a", time.Hour)))     // forged into the future
	h.send("u1", cmd(t0.Add(-48*time.Hour), delay("b", 47*time.Hour))) // forged into the past
	h.send("u1", cmd(t0, &pb.FollowUp{TaskId: "c", When: &pb.FollowUp_DueAt{DueAt: &timestamppb.Timestamp{Seconds: 1 << 40}}}))
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+14155550123", OnboardedAt: timestamppb.New(y2300)}}})
	h.send("u1", cmd(t0, delay("ok", time.Second)), tester.WithTime(y2300)) // the record time itself out of range
	h.send("u1", cmd(t0.Add(23*time.Hour), delay("d", time.Second)))        // within the skew: accepted
	var reasons []string
	for _, d := range h.deadLetters() {
		reasons = append(reasons, d.GetReason())
	}
	want := []string{"time_out_of_range", "requested_at_skew", "requested_at_skew", "time_out_of_range", "time_out_of_range", "time_out_of_range"}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Fatalf("dead letters %v, want %v", reasons, want)
	}
	h.tickAt(time.Hour)
	h.expectCalls()
	if st := h.state("u1"); len(st.GetPending()) != 1 || st.GetPending()[0].GetTaskId() != "d" {
		t.Fatalf("state %v", st)
	}
}

// An Onboard without follow-ups for a user that exists (a phone or time
// zone update) schedules nothing: the default follow-up is for a user's
// first onboarding only, whether the first one fired or is still pending.
func TestOnboardUpdateDoesNotCallAgain(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1")
	h.tickAt(time.Minute)
	first := h.expectCalls("followup-1")[0]

	h.clk.Set(t0.Add(2 * time.Minute))
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345679"}}})
	h.tickAt(time.Hour)
	h.expectCalls()
	st := h.state("u1")
	if len(st.GetPending()) != 0 || len(st.GetFired()) != 1 || st.GetFired()[0].GetCallId() != first.GetCallId() || st.GetPhone() != "+4915112345679" {
		t.Fatalf("state after update %v", st)
	}

	h.onboard("u2")
	h.send("u2", &pb.Command{UserId: "u2", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{TimeZone: "America/New_York"}}})
	if st := h.state("u2"); len(st.GetPending()) != 1 || st.GetTimeZone() != "America/New_York" {
		t.Fatalf("state after update %v", st)
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

func TestDuplicateTicksFireOnce(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", time.Second))
	h.tickAt(time.Second)
	h.tickAt(time.Second)
	h.expectCalls("a")
	h.tickAt(2 * time.Second)
	h.expectCalls()
}

// deadLetters drains the dead-letter topic.
func (h *harness) deadLetters() []*pb.DeadLetter {
	var out []*pb.DeadLetter
	for {
		_, v, ok := h.dlq.Next()
		if !ok {
			return out
		}
		out = append(out, v.(*pb.DeadLetter))
	}
}

func TestBadCommandsGoToTheDeadLetterTopic(t *testing.T) {
	h := newHarness(t)
	topic := string(h.topics.Onboarding)
	h.tt.Consume(topic, "u1", &codec.Undecodable{Data: []byte{0xff, 0xff, 0xff}}, tester.WithHeaders(goka.Headers{"trace": []byte("abc")}))
	h.send("u1", &pb.Command{UserId: "u2", Command: &pb.Command_Cancel{Cancel: &pb.Cancel{}}})
	h.send("u1", &pb.Command{UserId: "u1"})
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "0151-123"}}})
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345678", TimeZone: "Mars/Olympus"}}})
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345678", FollowUps: []*pb.FollowUp{delay("a", -time.Second)}}}})
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{FollowUps: []*pb.FollowUp{delay("a", time.Second)}}}})
	want := []deadletter.Reason{deadletter.ReasonUndecodable, deadletter.ReasonKeyMismatch, deadletter.ReasonUnknownCommand, deadletter.ReasonInvalidPhone, deadletter.ReasonUnknownTimeZone, deadletter.ReasonNegativeDelay, deadletter.ReasonMissingPhone}
	dls := h.deadLetters()
	if len(dls) != len(want) || h.s.Stats.Invalid.Load() != int64(len(want)) {
		t.Fatalf("%d dead letters (invalid %d), want %d: %v", len(dls), h.s.Stats.Invalid.Load(), len(want), dls)
	}
	for i, dl := range dls {
		if dl.GetReason() != string(want[i]) || dl.GetSourceTopic() != topic || string(dl.GetKey()) != "u1" || dl.GetGroup() != string(h.topics.Scheduler) || dl.GetDetail() == "" {
			t.Fatalf("dead letter %d: %v, want reason %s", i, dl, want[i])
		}
	}
	if string(dls[0].GetValue()) != "\xff\xff\xff" || len(dls[0].GetHeaders()) != 1 || dls[0].GetHeaders()[0].GetKey() != "trace" {
		t.Fatalf("undecodable record not kept whole: %v", dls[0])
	}
	var back pb.Command
	if err := proto.Unmarshal(dls[3].GetValue(), &back); err != nil || back.GetOnboard().GetPhone() != "0151-123" {
		t.Fatalf("rejected command not kept: %v %v", &back, err)
	}
	if h.state("u1") != nil {
		t.Fatal("a rejected command wrote state")
	}
	if got := h.s.DeadLetters()[string(deadletter.ReasonUndecodable)]; got != 1 {
		t.Fatalf("dead letter count for undecodable: %d", got)
	}
	// The pipeline goes on.
	h.onboard("u1", delay("a", time.Second))
	h.tickAt(time.Second)
	h.expectCalls("a")
}

// A stored value that does not decode is kept: the user's commands go to the
// dead-letter topic instead of replacing it with an empty value.
func TestUnreadableStateIsKeptAndCommandsDeadLettered(t *testing.T) {
	h := newHarness(t)
	bad := []byte{0x0a, 0x02, 0xff, 0xfe} // user_id with invalid UTF-8
	h.tt.SetTableValue(h.topics.SchedulerTable(), "u1", &codec.Undecodable{Data: bad})
	h.onboard("u1", delay("a", time.Second))
	dls := h.deadLetters()
	if len(dls) != 1 || dls[0].GetReason() != string(deadletter.ReasonUnreadableState) {
		t.Fatalf("dead letters %v", dls)
	}
	u, ok := h.tt.TableValue(h.topics.SchedulerTable(), "u1").(*codec.Undecodable)
	if !ok || string(u.Data) != string(bad) {
		t.Fatalf("stored value %v, want the original bytes kept", h.tt.TableValue(h.topics.SchedulerTable(), "u1"))
	}
	h.tickAt(time.Hour)
	h.expectCalls()
}

func TestUndecodableTickGoesToTheDeadLetterTopicAndStillFires(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", time.Second))
	h.clk.Set(t0.Add(time.Second))
	h.tt.Consume(string(h.topics.Ticks), tickKey, &codec.Undecodable{Data: []byte{0xff}})
	dls := h.deadLetters()
	if len(dls) != 1 || dls[0].GetReason() != string(deadletter.ReasonUndecodable) || dls[0].GetSourceTopic() != string(h.topics.Ticks) {
		t.Fatalf("dead letters %v", dls)
	}
	h.expectCalls("a")
}

// A command whose key belongs on another partition is forwarded to the same
// topic (the producer's partitioner was not murmur2). The tester has one
// partition, so the forwarded record arrives misrouted again, which must end
// in the dead-letter topic instead of looping.
func TestMisroutedCommandIsForwardedOnce(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Partitions = 8 })
	var key string
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("user-%d", i); topology.Partition(k, 8) != 0 {
			key = k
		}
	}
	issued := t0.Add(-time.Minute)
	onboarding := h.tt.NewQueueTracker(string(h.topics.Onboarding))
	h.send(key, &pb.Command{UserId: key, Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345678", FollowUps: []*pb.FollowUp{delay("a", time.Hour)}}}},
		tester.WithTime(issued))
	if h.s.Stats.Forwarded.Load() != 1 {
		t.Fatalf("forwarded %d, want 1", h.s.Stats.Forwarded.Load())
	}
	onboarding.Seek(1)
	hdr, _, v, ok := onboarding.NextWithHeaders()
	if !ok || string(hdr[HeaderForwarded]) == "" || !v.(*pb.Command).GetRequestedAt().AsTime().Equal(issued) {
		t.Fatalf("forwarded record: ok %v headers %v value %v; want the header and the original issue time", ok, hdr, v)
	}
	dls := h.deadLetters()
	if len(dls) != 1 || dls[0].GetReason() != string(deadletter.ReasonMisroutedForward) {
		t.Fatalf("dead letters %v", dls)
	}
	if h.state(key) != nil {
		t.Fatal("a misrouted command was applied on the wrong partition")
	}
}

func TestLimits(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.Limits = Limits{MaxDelay: 48 * time.Hour, MaxPast: time.Hour, PastDue: PastDueReject, MaxPayload: 8}
	})
	ob := func(f ...*pb.FollowUp) *pb.Command {
		return &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345678", FollowUps: f}}}
	}
	h.send("u1", ob(delay("a", 49*time.Hour)))
	h.send("u1", ob(at("a", t0.Add(49*time.Hour))))
	h.send("u1", ob(at("a", t0.Add(-2*time.Hour))))
	h.send("u1", ob(&pb.FollowUp{TaskId: "a", When: &pb.FollowUp_Delay{Delay: durationpb.New(time.Hour)}, Payload: make([]byte, 9)}))
	want := []deadletter.Reason{deadletter.ReasonDelayTooLong, deadletter.ReasonDueTooFarFuture, deadletter.ReasonDueTooFarPast, deadletter.ReasonPayloadTooLarge}
	dls := h.deadLetters()
	if len(dls) != len(want) {
		t.Fatalf("dead letters %v", dls)
	}
	for i, dl := range dls {
		if dl.GetReason() != string(want[i]) {
			t.Fatalf("dead letter %d reason %s, want %s", i, dl.GetReason(), want[i])
		}
	}
	// Within the limits: a due time 30 minutes in the past fires at once.
	h.send("u1", ob(at("late", t0.Add(-30*time.Minute)), delay("b", 48*time.Hour)))
	h.tickAt(0)
	h.expectCalls("late")
}

func TestPastDueFirePolicy(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.Limits = Limits{MaxDelay: time.Hour, MaxPast: time.Minute, PastDue: PastDueFire} })
	h.onboard("u1", at("old", t0.Add(-24*time.Hour)))
	h.tickAt(0)
	h.expectCalls("old")
}

func TestValidateReasons(t *testing.T) {
	onb := func(o *pb.Onboard) *pb.Command {
		return &pb.Command{UserId: "u", Command: &pb.Command_Onboard{Onboard: o}}
	}
	cases := []struct {
		key  string
		cmd  *pb.Command
		want deadletter.Reason
	}{
		{"", &pb.Command{}, deadletter.ReasonMissingUserID},
		{"a", &pb.Command{UserId: "b"}, deadletter.ReasonKeyMismatch},
		{tickKey, &pb.Command{}, deadletter.ReasonReservedUserID},
		{"u", &pb.Command{UserId: "u"}, deadletter.ReasonUnknownCommand},
		{"u", onb(&pb.Onboard{Phone: "+0123"}), deadletter.ReasonInvalidPhone},
		{"u", onb(&pb.Onboard{TimeZone: "Nowhere/City"}), deadletter.ReasonUnknownTimeZone},
		{"u", onb(&pb.Onboard{FollowUps: []*pb.FollowUp{delay("x", -1)}}), deadletter.ReasonNegativeDelay},
		{"u", onb(&pb.Onboard{FollowUps: []*pb.FollowUp{delay("x", 401*24*time.Hour)}}), deadletter.ReasonDelayTooLong},
		{"u", onb(&pb.Onboard{FollowUps: []*pb.FollowUp{at("x", t0.Add(401*24*time.Hour))}}), deadletter.ReasonDueTooFarFuture},
		{"u", onb(&pb.Onboard{FollowUps: []*pb.FollowUp{at("x", t0.Add(-25*time.Hour))}}), deadletter.ReasonDueTooFarPast},
		{"u", onb(&pb.Onboard{FollowUps: []*pb.FollowUp{{TaskId: "x"}}}), deadletter.ReasonMissingWhen},
		{"u", onb(&pb.Onboard{FollowUps: []*pb.FollowUp{{TaskId: "x", When: &pb.FollowUp_Delay{Delay: durationpb.New(1)}, Payload: make([]byte, 16<<10+1)}}}), deadletter.ReasonPayloadTooLarge},
		{"u", onb(&pb.Onboard{FollowUps: []*pb.FollowUp{delay("x", 1), delay("x", 2)}}), deadletter.ReasonDuplicateTaskID},
		{"u", &pb.Command{UserId: "u", Command: &pb.Command_Reschedule{Reschedule: &pb.Reschedule{}}}, deadletter.ReasonMissingTaskID},
		{"u", &pb.Command{UserId: "u", Command: &pb.Command_Reschedule{Reschedule: &pb.Reschedule{TaskId: "x"}}}, deadletter.ReasonMissingWhen},
	}
	for _, c := range cases {
		_, _, err := Validate(c.key, c.cmd, t0, DefaultLimits())
		re, ok := err.(*RejectError)
		if !ok || re.Reason != c.want {
			t.Errorf("Validate(%q, %v) = %v, want reason %s", c.key, c.cmd, err, c.want)
		}
	}
	valid := onb(&pb.Onboard{Phone: "+14155550123", TimeZone: "America/Los_Angeles", FollowUps: []*pb.FollowUp{delay("x", time.Hour), at("y", t0.Add(-time.Hour))}})
	if u, issued, err := Validate("u", valid, t0, DefaultLimits()); err != nil || u != "u" || !issued.Equal(t0) {
		t.Fatalf("valid command rejected: %v", err)
	}
}

// replayHarness starts a scheduler on a table that already holds three
// users (due t0+1s, +2s, +3s) and a mark through the second, as a restart
// after a crash finds it. The clock is at t0+3s.
func replayHarness(t *testing.T, mark dueindex.Mark) *harness {
	t.Helper()
	mem := storage.NewMemory()
	put := func(key string, v proto.Message) {
		b, err := proto.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := mem.Set(key, b); err != nil {
			t.Fatal(err)
		}
	}
	for i, u := range []string{"u1", "u2", "u3"} {
		put(u, &pb.UserState{UserId: u, Phone: "+4915112345678", Pending: []*pb.Task{{TaskId: "a", DueAt: timestamppb.New(t0.Add(time.Duration(i+1) * time.Second)), Attempt: 1}}})
	}
	put(tickKey, markValue(tickKey, mark))
	table := string(topology.NewTopics("").SchedulerTable())
	h := newHarness(t, func(c *Config) {
		inner := c.Storage
		c.Storage = func(topic string, part int32) (storage.Storage, error) {
			if topic == table {
				return mem, nil
			}
			return inner(topic, part)
		}
	})
	h.clk.Set(t0.Add(3 * time.Second))
	h.tt.Catchup() // the processor has started: the index is open
	return h
}

func posAt(user string, d time.Duration) dueindex.Pos {
	return dueindex.Pos{Due: t0.Add(d).UnixNano(), User: user, Task: "a"}
}

// A tick at or below the mark's last tick offset is a replay: the calls
// fired since it was sent are published again, with the same ids, before
// what is due now.
func TestReplayedTickPublishesItsCallsAgain(t *testing.T) {
	h := replayHarness(t, dueindex.Mark{Through: posAt("u2", 2*time.Second), LastTick: 5})
	if p := h.s.Punctuator().Index(0).Pending(); len(p) != 1 || p[0].User != "u3" {
		t.Fatalf("index after open %v, want only u3", p)
	}
	h.tt.Consume(string(h.topics.Ticks), tickKey, &pb.Tick{FiredThrough: position(posAt("u1", time.Second))})
	calls := h.expectCalls("a", "a")
	if calls[0].GetUserId() != "u2" || calls[1].GetUserId() != "u3" {
		t.Fatalf("calls for %s, %s; want u2 (again), u3", calls[0].GetUserId(), calls[1].GetUserId())
	}
	if want := CallID("u2", &pb.Task{TaskId: "a", DueAt: timestamppb.New(t0.Add(2 * time.Second)), Attempt: 1}); calls[0].GetCallId() != want {
		t.Fatalf("republished call id %s, want %s", calls[0].GetCallId(), want)
	}
	if h.s.Stats.Replays.Load() != 1 || h.s.Stats.Republished.Load() != 1 || h.s.Stats.ReplayScans.Load() != 0 {
		t.Fatalf("stats: replays %d republished %d scans %d", h.s.Stats.Replays.Load(), h.s.Stats.Republished.Load(), h.s.Stats.ReplayScans.Load())
	}
	// Only the first tick after the restart replays.
	h.tt.Consume(string(h.topics.Ticks), tickKey, &pb.Tick{})
	h.expectCalls()
}

// A replay reaching back before the checkpoint finds the older fired
// follow-ups by scanning the partition.
func TestReplayBeforeTheCheckpointScans(t *testing.T) {
	h := replayHarness(t, dueindex.Mark{Through: posAt("u2", 2*time.Second), Checkpoint: posAt("u1", time.Second), LastTick: 5})
	h.tt.Consume(string(h.topics.Ticks), tickKey, &pb.Tick{})
	calls := h.expectCalls("a", "a", "a")
	for i, u := range []string{"u1", "u2", "u3"} {
		if calls[i].GetUserId() != u {
			t.Fatalf("call %d for %s, want %s", i, calls[i].GetUserId(), u)
		}
	}
	if h.s.Stats.ReplayScans.Load() != 1 || h.s.Stats.Republished.Load() != 2 {
		t.Fatalf("scans %d republished %d", h.s.Stats.ReplayScans.Load(), h.s.Stats.Republished.Load())
	}
}

// The first tick after a clean restart is past the mark's last tick: no
// replay.
func TestTickAfterTheMarkIsNoReplay(t *testing.T) {
	h := replayHarness(t, dueindex.Mark{Through: posAt("u2", 2*time.Second), LastTick: -1})
	h.tt.Consume(string(h.topics.Ticks), tickKey, &pb.Tick{FiredThrough: position(posAt("u1", time.Second))})
	if calls := h.expectCalls("a"); calls[0].GetUserId() != "u3" {
		t.Fatalf("call for %s", calls[0].GetUserId())
	}
	if h.s.Stats.Replays.Load() != 0 {
		t.Fatal("counted a replay")
	}
}

// The harness's scheduler runs as in production: its due index keeps a
// window of the store's due order.
func TestHarnessIndexIsWindowed(t *testing.T) {
	h := newHarness(t)
	h.onboard("u1", delay("a", time.Hour))
	if x := h.s.Punctuator().Index(0); x == nil || !x.Windowed() || x.Len() != 0 {
		t.Fatalf("index %v: want a window, empty with the follow-up an hour away", x)
	}
	h.tickAt(time.Hour)
	h.expectCalls("a")
}
