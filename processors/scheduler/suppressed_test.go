package scheduler

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lovoo/goka"
	gokacodec "github.com/lovoo/goka/codec"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/policy"
	"github.com/ivrsched/ivrsched/internal/suppress"
)

var testKey = suppress.Key("0123456789abcdef0123456789abcdef")

const (
	harnessNum  = "+4915112345678" // the number harness.onboard gives every user
	otherNumber = "+4915112345679"
)

// suppressions is the do-not-call list of a test: a Goka view of the
// suppression topic on the harness's tester, as the application reads it.
type suppressions struct {
	h    *harness
	view *goka.View
	fail atomic.Bool // Check fails while set
	pol  atomic.Pointer[policy.Policy]
}

// withSuppressions gives the scheduler the list l (set up by suppressed).
func withSuppressions(l **suppress.List) func(*Config) {
	return func(c *Config) {
		*l = &suppress.List{Hasher: suppress.Hasher{Key: testKey}, Clock: c.Clock}
		c.Suppressions = *l
	}
}

// newSuppressed builds a harness whose scheduler checks a view of the
// suppression topic.
func newSuppressed(t *testing.T, opts ...func(*Config)) *suppressions {
	t.Helper()
	var l *suppress.List
	h := newHarness(t, append(opts, withSuppressions(&l))...)
	v, err := goka.NewView(nil, h.topics.Suppressions, new(gokacodec.Bytes), goka.WithViewTester(h.tt))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-v.WaitRunning()
	s := &suppressions{h: h, view: v}
	l.Get = func(key string) ([]byte, error) {
		if s.fail.Load() {
			return nil, errors.New("injected view fault")
		}
		b, err := v.Get(key)
		if b == nil || err != nil {
			return nil, err
		}
		return b.([]byte), nil
	}
	l.Policy = s.pol.Load
	return s
}

// add lists number until until (zero: no end).
func (s *suppressions) add(number, reason string, until time.Time) {
	e := &pb.Suppression{Reason: reason, AddedAt: timestamppb.New(s.h.clk.Now()), Source: pb.Suppression_SOURCE_CLI}
	if !until.IsZero() {
		e.Until = timestamppb.New(until)
	}
	b, _ := proto.Marshal(e)
	s.h.tt.SetTableValue(s.h.topics.Suppressions, testKey.Hash(number), b)
}

func (h *harness) onboardNumber(user, number string, f ...*pb.FollowUp) {
	h.send(user, &pb.Command{UserId: user, Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: number, TimeZone: "Europe/Berlin", FollowUps: f}}})
}

// expectSuppressed drains the events and wants one KIND_SUPPRESSED per
// task, in order, each with the entry's reason and time.
func (h *harness) expectSuppressed(reason string, tasks ...string) []*pb.ScheduleEvent {
	h.t.Helper()
	var got []*pb.ScheduleEvent
	for _, e := range h.nextEvents() {
		if e.GetKind() == pb.ScheduleEvent_KIND_SUPPRESSED {
			got = append(got, e)
		}
	}
	if len(got) != len(tasks) {
		h.t.Fatalf("got %d suppressed reports %v, want tasks %v", len(got), got, tasks)
	}
	for i, e := range got {
		if e.GetTaskId() != tasks[i] || e.GetReason() != reason || e.GetSuppressedAt() == nil || e.GetCallId() == "" {
			h.t.Fatalf("report %d: %v, want task %q, reason %q, the entry's time and the call id", i, e, tasks[i], reason)
		}
	}
	return got
}

// A suppressed number's due follow-ups are not called: each is reported
// KIND_SUPPRESSED, once, and done (the mark passes it, the next command
// records it as fired); another number is called as usual.
func TestSuppressedNumberIsNotCalled(t *testing.T) {
	s := newSuppressed(t)
	h := s.h
	h.onboard("u1", delay("a", time.Second), delay("b", 2*time.Second))
	h.onboardNumber("u2", otherNumber, delay("c", time.Second))
	h.nextEvents()
	s.add(harnessNum, "opted out", time.Time{})
	h.tickAt(time.Second)
	h.expectCalls("c")
	h.expectSuppressed("opted out", "a")
	h.tickAt(2 * time.Second)
	h.expectCalls()
	h.expectSuppressed("opted out", "b")
	h.tickAt(3 * time.Second) // nothing reported twice
	h.expectSuppressed("opted out")
	if n := h.s.Stats.Suppressed.Load(); n != 2 {
		t.Fatalf("suppressed count %d", n)
	}
	h.onboard("u1") // settles what the ticks did
	if st := h.state("u1"); len(st.GetPending()) != 0 || len(st.GetFired()) != 2 {
		t.Fatalf("state %v", st)
	}
}

// An entry ends at its until, by the scheduler's clock.
func TestSuppressionUntilExpires(t *testing.T) {
	s := newSuppressed(t)
	h := s.h
	h.onboard("u1", delay("a", time.Second), delay("b", time.Minute))
	s.add(harnessNum, "for a while", t0.Add(30*time.Second))
	h.tickAt(time.Second)
	h.expectCalls()
	h.expectSuppressed("for a while", "a")
	h.tickAt(time.Minute)
	h.expectCalls("b")
	h.expectSuppressed("for a while")
}

// The list is by number: a Forget and a new onboarding of the same number,
// under the same or another user id, do not lift it.
func TestSuppressionSurvivesForgetAndReonboarding(t *testing.T) {
	s := newSuppressed(t)
	h := s.h
	s.add(harnessNum, "do not call", time.Time{})
	h.onboard("u1", delay("a", time.Hour))
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Forget{Forget: &pb.Forget{}}})
	h.onboard("u1", delay("b", time.Second))
	h.onboard("u3", delay("c", time.Second))
	h.nextEvents()
	h.tickAt(time.Second)
	h.expectCalls()
	h.expectSuppressed("do not call", "b", "c")
}

// A campaign the calling policy exempts (suppression_exempt) is called.
func TestSuppressionExemptCampaignIsCalled(t *testing.T) {
	s := newSuppressed(t)
	h := s.h
	pol, err := policy.Parse([]byte("default: {open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: \"00:00\", to: \"24:00\"}]}\ncampaigns:\n  urgent: {suppression_exempt: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s.pol.Store(pol)
	s.add(harnessNum, "do not call", time.Time{})
	urgent := delay("a", time.Second)
	urgent.Action.CampaignId = "urgent"
	h.onboard("u1", urgent, delay("b", time.Second))
	h.nextEvents()
	h.tickAt(time.Second)
	h.expectCalls("a")
	h.expectSuppressed("do not call", "b")
}

// A follow-up a command fires itself (scheduled at or before the mark) is
// checked too, and recorded as fired in the same write.
func TestSuppressedInTheCommandCallback(t *testing.T) {
	s := newSuppressed(t)
	h := s.h
	h.onboardNumber("u2", otherNumber, delay("x", 10*time.Second))
	h.tickAt(10 * time.Second)
	h.expectCalls("x")
	s.add(harnessNum, "do not call", time.Time{})
	h.nextEvents()
	h.onboard("u1", at("past", t0.Add(5*time.Second)))
	h.expectCalls()
	h.expectSuppressed("do not call", "past")
	if st := h.state("u1"); len(st.GetPending()) != 0 || len(st.GetFired()) != 1 {
		t.Fatalf("state %v", st)
	}
}

// A list that cannot be read fails the partition: nothing called, nothing
// reported, and the mark stays before the follow-up.
func TestSuppressionReadErrorFailsThePartition(t *testing.T) {
	f := &faultyStore{}
	s := newSuppressed(t, withFaultyTable(f))
	h := s.h
	h.onboard("u1", delay("a", time.Second))
	h.nextEvents()
	s.fail.Store(true)
	h.tickAt(time.Second)
	h.expectFailure("injected view fault")
	if m := f.value(t, tickKey); m != nil {
		t.Fatalf("mark written: %v", m)
	}
	h.expectCalls()
	h.expectSuppressed("")
}

// A call the dialer did not place because the number was listed after the
// follow-up fired (CallEnded OUTCOME_SUPPRESSED) ends the follow-up with
// KIND_SUPPRESSED, without a retry even where the policy retries.
func TestCallEndedSuppressedIsReported(t *testing.T) {
	var pol atomic.Pointer[policy.Policy]
	p, err := policy.Parse([]byte("default: {open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: \"00:00\", to: \"24:00\"}], retry: {failed: {delay: 1m}}}"))
	if err != nil {
		t.Fatal(err)
	}
	pol.Store(p)
	h := newHarness(t, withPolicy(&pol))
	h.onboard("u1", delay("a", time.Second))
	h.tickAt(time.Second)
	c := h.expectCalls("a")[0]
	h.nextEvents()
	h.send("u1", &pb.Command{UserId: "u1", RequestedAt: timestamppb.New(h.clk.Now()), Command: &pb.Command_CallEnded{CallEnded: &pb.CallEnded{
		TaskId: "a", CallId: c.GetCallId(), Attempt: 1, Outcome: pb.Outcome_OUTCOME_SUPPRESSED, Detail: suppress.Detail(&pb.Suppression{Reason: "opted out"})}}})
	got := h.nextEvents()
	if len(got) != 1 || got[0].GetKind() != pb.ScheduleEvent_KIND_SUPPRESSED || got[0].GetReason() != "opted out" || got[0].GetCallId() != c.GetCallId() {
		t.Fatalf("events %v", got)
	}
	if st := h.state("u1"); len(st.GetPending()) != 0 {
		t.Fatalf("a retry was scheduled: %v", st)
	}
}

// Each occurrence of a series to a listed number is reported suppressed,
// and the series goes on: an occurrence after the entry ends is called.
func TestSuppressedSeriesGoesOn(t *testing.T) {
	s := newSuppressed(t)
	h := s.h
	f := delay("r", time.Minute)
	f.Repeat = &pb.Repeat{Every: "1m"}
	h.onboard("u1", f)
	h.nextEvents()
	s.add(harnessNum, "for two minutes", t0.Add(2*time.Minute+30*time.Second))
	for _, d := range []time.Duration{time.Minute, 2 * time.Minute} {
		h.tickAt(d)
		h.tickAt(d) // the wake's next occurrence is in the index now
		h.expectCalls()
		h.expectSuppressed("for two minutes", "r")
	}
	h.tickAt(3 * time.Minute)
	h.expectCalls("r")
}

// A retry scheduled before the number was listed is reported suppressed
// when it falls due, and the follow-up ends there: no further attempt.
func TestSuppressedRetryEndsTheFollowUp(t *testing.T) {
	var pol atomic.Pointer[policy.Policy]
	pol.Store(mustPolicy(t, retryPolicy))
	s := newSuppressed(t, withPolicy(&pol))
	h := s.h
	h.onboard("u1", delay("a", time.Minute))
	h.tickAt(time.Minute)
	c1 := h.expectCalls("a")[0]
	h.clk.Set(t0.Add(90 * time.Second))
	h.ended(c1, pb.Outcome_OUTCOME_NO_ANSWER) // attempt 2 at 11m30s
	h.nextEvents()
	s.add(harnessNum, "opted out", time.Time{})
	h.tickAt(11*time.Minute + 30*time.Second)
	h.expectCalls()
	if e := h.expectSuppressed("opted out", "a"); e[0].GetCallId() == c1.GetCallId() {
		t.Fatalf("the report names attempt 1's call id")
	}
	h.tickAt(time.Hour)
	h.expectCalls()
	h.onboard("u1")
	if st := h.state("u1"); len(st.GetPending()) != 0 {
		t.Fatalf("pending after the suppressed retry: %v", st.GetPending())
	}
}

// A follow-up not called because its number is on the do-not-call list is
// not a call for the frequency cap: with one call a day, a follow-up
// scheduled later the same day fires at its time, whether the tick or the
// dialer found the number listed.
func TestSuppressedDoesNotCountTowardTheCap(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	day := time.Date(2026, 6, 10, 0, 0, 0, 0, berlin)
	for _, by := range []string{"tick", "dialer"} {
		t.Run(by, func(t *testing.T) {
			var p atomic.Pointer[policy.Policy]
			p.Store(mustPolicy(t, `{default: {cap: {calls: 1, per: 24h}}}`))
			s := newSuppressed(t, withPolicy(&p))
			h := s.h
			h.clk.Jump(day.Add(9 * time.Hour))
			h.onboardUser("u1", harnessNum, "Europe/Berlin", at("first", day.Add(10*time.Hour)))
			h.nextEvents()
			switch by {
			case "tick":
				s.add(harnessNum, "until eleven", day.Add(11*time.Hour))
				h.tickTime(day.Add(10 * time.Hour))
				h.expectCalls()
				h.expectSuppressed("until eleven", "first")
			case "dialer":
				h.tickTime(day.Add(10 * time.Hour))
				c := h.expectCalls("first")[0]
				h.send("u1", &pb.Command{UserId: "u1", RequestedAt: timestamppb.New(h.clk.Now()), Command: &pb.Command_CallEnded{CallEnded: &pb.CallEnded{
					TaskId: "first", CallId: c.GetCallId(), Attempt: 1, Outcome: pb.Outcome_OUTCOME_SUPPRESSED, Detail: suppress.Detail(&pb.Suppression{Reason: "listed"})}}})
				if ev := h.nextEvents(); len(ev) != 1 || ev[0].GetKind() != pb.ScheduleEvent_KIND_SUPPRESSED || ev[0].GetReason() != "listed" {
					t.Fatalf("events %v, want first reported suppressed", ev)
				}
			}
			h.clk.Set(day.Add(12 * time.Hour))
			h.onboardUser("u1", harnessNum, "Europe/Berlin", at("second", day.Add(15*time.Hour)))
			if second := h.task("u1", "second"); !second.GetDueAt().AsTime().Equal(day.Add(15*time.Hour)) || second.GetDeferred() != "" {
				t.Fatalf("second due %v (deferred %q), want %v: the suppressed first counted toward the cap",
					second.GetDueAt().AsTime().In(berlin), second.GetDeferred(), day.Add(15*time.Hour).In(berlin))
			}
			st := h.state("u1")
			if len(st.GetFired()) != 1 || st.GetFired()[0].GetTask().GetOutcome() != pb.Outcome_OUTCOME_SUPPRESSED {
				t.Fatalf("fired history %v, want first with the outcome suppressed", st.GetFired())
			}
			h.tickTime(day.Add(15 * time.Hour))
			h.expectCalls("second")
		})
	}
}
