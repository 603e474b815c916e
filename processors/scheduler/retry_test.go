package scheduler

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
)

// retryPolicy calls at any hour and retries a no-answer twice, 10 min then
// 20 min later (no jitter, so the tests know the times).
const retryPolicy = `
default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "00:00", to: "24:00"}]
  retry:
    max_attempts: 3
    max_age: 1d
    no-answer: {delay: 10m, jitter: 0}
campaigns:
  once:
    retry: none
`

// ended sends the dialer's report that call ended with outcome, issued now.
func (h *harness) ended(call *pb.IVRCall, o pb.Outcome) {
	h.t.Helper()
	h.send(call.GetUserId(), &pb.Command{UserId: call.GetUserId(), RequestedAt: timestamppb.New(h.clk.Now()), Command: &pb.Command_CallEnded{
		CallEnded: &pb.CallEnded{TaskId: call.GetTaskId(), CallId: call.GetCallId(), Attempt: call.GetAttempt(), Outcome: o}}})
}

// kinds drains the events and returns their kinds (with the reason).
func (h *harness) kinds() []string {
	var out []string
	for _, e := range h.nextEvents() {
		k := e.GetKind().String()[len("KIND_"):]
		if e.GetReason() != "" {
			k += "(" + e.GetReason() + ")"
		}
		out = append(out, k)
	}
	return out
}

func (h *harness) expectKinds(want ...string) {
	h.t.Helper()
	got := h.kinds()
	if len(got) != len(want) {
		h.t.Fatalf("events %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			h.t.Fatalf("events %v, want %v", got, want)
		}
	}
}

// Attempt 1 ends unanswered: the scheduler schedules attempt 2 of the
// same follow-up 10 min after the outcome, under its own call id; it fires
// then, never before; answered, it ends the follow-up with one final
// event. The dialer's reports, replayed (its callback ran again after a
// crash), change nothing: no second attempt, no second final event.
func TestRetryAfterNoAnswerThenAnswered(t *testing.T) {
	h, _ := newPolicyHarness(t, retryPolicy, t0)
	h.onboard("u1", delay("a", time.Minute))
	h.tickAt(time.Minute)
	c1 := h.expectCalls("a")[0]
	h.clk.Set(t0.Add(90 * time.Second))
	h.ended(c1, pb.Outcome_OUTCOME_NO_ANSWER)
	h.expectKinds("RETRY(no-answer)")
	retry := h.task("u1", "a")
	due := t0.Add(90*time.Second + 10*time.Minute)
	if retry.GetAttempt() != 2 || !retry.GetDueAt().AsTime().Equal(due) || !retry.GetFirstRequestedAt().AsTime().Equal(t0.Add(time.Minute)) {
		t.Fatalf("retry %v, want attempt 2 due %v", retry, due)
	}
	h.ended(c1, pb.Outcome_OUTCOME_NO_ANSWER) // replayed
	h.expectKinds()
	if st := h.state("u1"); len(st.GetPending()) != 1 {
		t.Fatalf("pending after the replay: %v", st.GetPending())
	}

	h.tickAt(90*time.Second + 10*time.Minute - time.Millisecond)
	h.expectCalls()
	h.tickAt(90*time.Second + 10*time.Minute)
	c2 := h.expectCalls("a")[0]
	if c2.GetAttempt() != 2 || c2.GetCallId() == c1.GetCallId() {
		t.Fatalf("attempt %d call id %s (first %s)", c2.GetAttempt(), c2.GetCallId(), c1.GetCallId())
	}
	h.clk.Set(t0.Add(12 * time.Minute))
	h.ended(c2, pb.Outcome_OUTCOME_ANSWERED)
	h.expectKinds("ANSWERED(answered)")
	h.ended(c2, pb.Outcome_OUTCOME_ANSWERED)
	h.ended(c1, pb.Outcome_OUTCOME_NO_ANSWER)
	h.expectKinds()
	if st := h.state("u1"); len(st.GetPending()) != 0 {
		t.Fatalf("pending: %v", st.GetPending())
	}
	h.tickAt(time.Hour)
	h.expectCalls()
	if h.s.Stats.Retries.Load() != 1 || h.s.Stats.Ended.Load() != 1 || h.s.Stats.EndedRepeats.Load() != 3 {
		t.Fatalf("retries %d ended %d repeats %d", h.s.Stats.Retries.Load(), h.s.Stats.Ended.Load(), h.s.Stats.EndedRepeats.Load())
	}
}

// The attempts' delays double; max_attempts ends the follow-up, reported
// once as exhausted; an outcome the rules do not retry ends it at once; a
// campaign without retries reports nothing (ivr-results has its outcome)
// and writes nothing.
func TestRetryExhaustedAndNotRetried(t *testing.T) {
	h, _ := newPolicyHarness(t, retryPolicy, t0)
	h.onboard("u1", delay("a", time.Minute))
	h.tickAt(time.Minute)
	call := h.expectCalls("a")[0]
	at := time.Minute
	for n, wait := range []time.Duration{10 * time.Minute, 20 * time.Minute} {
		h.ended(call, pb.Outcome_OUTCOME_NO_ANSWER)
		h.expectKinds("RETRY(no-answer)")
		if got := h.task("u1", "a").GetDueAt().AsTime().Sub(h.clk.Now()); got != wait {
			t.Fatalf("retry %d after %v, want %v", n+1, got, wait)
		}
		at += wait
		h.tickAt(at)
		call = h.expectCalls("a")[0]
	}
	h.ended(call, pb.Outcome_OUTCOME_NO_ANSWER)
	h.expectKinds("EXHAUSTED(max_attempts)")
	if call.GetAttempt() != 3 || len(h.state("u1").GetPending()) != 0 {
		t.Fatalf("attempt %d, pending %v", call.GetAttempt(), h.state("u1").GetPending())
	}

	h.onboard("u2", delay("b", time.Hour))
	h.tickAt(at + time.Hour)
	h.ended(h.expectCalls("b")[0], pb.Outcome_OUTCOME_BUSY)
	h.expectKinds("EXHAUSTED(not_retried)")

	h.onboard("u3", &pb.FollowUp{TaskId: "c", When: delay("c", time.Hour).GetWhen(), Action: &pb.Action{CampaignId: "once"}})
	h.tickAt(at + 2*time.Hour)
	c := h.expectCalls("c")[0]
	h.ended(c, pb.Outcome_OUTCOME_NO_ANSWER)
	h.expectKinds()
	if after := h.state("u3"); len(after.GetFired()) != 1 || after.GetFired()[0].GetTask().GetOutcome() != pb.Outcome_OUTCOME_UNSPECIFIED || len(after.GetPending()) != 0 {
		t.Fatalf("a follow-up without retries recorded %v", after)
	}
}

// The retry is placed by the calling policy like any follow-up: one whose
// backoff ends after the window closed waits for the next opening
// (reported deferred), and max_age counts to that effective time.
func TestRetryDeferredByTheWindowAndTooOld(t *testing.T) {
	const doc = `
default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "09:00", to: "17:00"}]
  retry: {max_attempts: 3, max_age: 1d, no-answer: {delay: 10m, jitter: 0}}
campaigns:
  urgent:
    retry: {max_attempts: 3, max_age: 6h, no-answer: {delay: 10m, jitter: 0}}
`
	berlin := zone(t, "Europe/Berlin")
	start := time.Date(2026, 3, 2, 16, 40, 0, 0, berlin)
	h, _ := newPolicyHarness(t, doc, start)
	h.onboard("u1", delay("a", 10*time.Minute))
	h.onboard("u2", &pb.FollowUp{TaskId: "b", When: delay("b", 10*time.Minute).GetWhen(), Action: &pb.Action{CampaignId: "urgent"}})
	h.nextEvents()
	h.tickTime(start.Add(10 * time.Minute))
	calls := h.nextCalls()
	if len(calls) != 2 {
		t.Fatalf("calls %v", calls)
	}
	h.clk.Set(start.Add(15 * time.Minute)) // 16:55: the retry would be at 17:05
	h.ended(calls[0], pb.Outcome_OUTCOME_NO_ANSWER)
	h.expectKinds("RETRY(no-answer)", "DEFERRED(window)")
	r := h.task("u1", "a")
	if !r.GetDueAt().AsTime().Equal(time.Date(2026, 3, 3, 9, 0, 0, 0, berlin)) || !r.GetRequestedAt().AsTime().Equal(start.Add(25*time.Minute)) || r.GetDeferred() != "window" {
		t.Fatalf("retry requested %v due %v (%s)", r.GetRequestedAt().AsTime().In(berlin), r.GetDueAt().AsTime().In(berlin), r.GetDeferred())
	}
	h.ended(calls[1], pb.Outcome_OUTCOME_NO_ANSWER)
	h.expectKinds("TOO_OLD(max_age)")
	if len(h.state("u2").GetPending()) != 0 {
		t.Fatal("a retry past max_age is pending")
	}
	h.tickTime(time.Date(2026, 3, 3, 8, 59, 59, 0, berlin))
	h.expectCalls()
	h.tickTime(time.Date(2026, 3, 3, 9, 0, 0, 0, berlin))
	if c := h.expectCalls("a")[0]; c.GetAttempt() != 2 {
		t.Fatalf("attempt %d", c.GetAttempt())
	}
}

// A Cancel or a Forget between attempts ends the follow-up: a pending
// retry is cancelled (its final outcome), nothing more is dialed; a Cancel
// while an attempt is being placed is too late for that call, and its
// unanswered outcome then ends the follow-up as cancelled instead of
// retrying. An outcome reported after a Forget makes no value.
func TestRetryEndedByCancelAndForget(t *testing.T) {
	h, _ := newPolicyHarness(t, retryPolicy, t0)
	for _, u := range []string{"u1", "u2", "u3"} {
		h.onboard(u, delay("a", time.Minute))
	}
	h.tickAt(time.Minute)
	calls := map[string]*pb.IVRCall{}
	for _, c := range h.nextCalls() {
		calls[c.GetUserId()] = c
	}
	h.ended(calls["u1"], pb.Outcome_OUTCOME_NO_ANSWER)
	h.ended(calls["u2"], pb.Outcome_OUTCOME_NO_ANSWER)
	h.expectKinds("RETRY(no-answer)", "RETRY(no-answer)")

	h.cancel("u1", "a")
	h.expectKinds("CANCELLED")
	h.send("u2", &pb.Command{UserId: "u2", Command: &pb.Command_Forget{Forget: &pb.Forget{}}})
	if got := h.nextEvents(); len(got) != 2 || got[0].GetKind() != pb.ScheduleEvent_KIND_CANCELLED || got[0].GetDetail() != "forgotten" || got[1].GetKind() != pb.ScheduleEvent_KIND_FORGOTTEN {
		t.Fatalf("forget reports %v", got)
	}
	h.ended(calls["u2"], pb.Outcome_OUTCOME_NO_ANSWER) // replayed after the forget
	if h.state("u2") != nil {
		t.Fatal("an outcome made a value for a forgotten user")
	}

	h.cancel("u3", "a") // the call is being placed
	h.expectKinds("TOO_LATE")
	h.ended(calls["u3"], pb.Outcome_OUTCOME_NO_ANSWER)
	h.expectKinds("CANCELLED(cancelled)")
	h.tickAt(time.Hour)
	h.expectCalls()
	for _, u := range []string{"u1", "u3"} {
		if p := h.state(u).GetPending(); len(p) != 0 {
			t.Fatalf("%s pending %v", u, p)
		}
	}
}

// The retry is a follow-up like any other: a Reschedule moves it.
func TestRetryCanBeRescheduled(t *testing.T) {
	h, _ := newPolicyHarness(t, retryPolicy, t0)
	h.onboard("u1", delay("a", time.Minute))
	h.tickAt(time.Minute)
	c1 := h.expectCalls("a")[0]
	h.ended(c1, pb.Outcome_OUTCOME_NO_ANSWER)
	h.reschedule("u1", "a", 2*time.Hour)
	h.tickAt(time.Hour)
	h.expectCalls()
	h.tickAt(time.Minute + 2*time.Hour)
	if c := h.expectCalls("a")[0]; c.GetAttempt() != 2 || c.GetCallId() == c1.GetCallId() {
		t.Fatalf("rescheduled retry: %v", c)
	}
}

// A report whose attempt or outcome is not one, or whose time the producer
// bent, is dead-lettered; the user's value is left as it was.
func TestCallEndedIsValidated(t *testing.T) {
	h, _ := newPolicyHarness(t, retryPolicy, t0)
	h.onboard("u1", delay("a", time.Minute))
	h.tickAt(time.Minute)
	c := h.expectCalls("a")[0]
	send := func(e *pb.CallEnded, requested time.Time) {
		h.send("u1", &pb.Command{UserId: "u1", RequestedAt: timestamppb.New(requested), Command: &pb.Command_CallEnded{CallEnded: e}})
	}
	now := h.clk.Now()
	send(&pb.CallEnded{TaskId: "a", CallId: c.GetCallId(), Attempt: 0, Outcome: pb.Outcome_OUTCOME_NO_ANSWER}, now)
	send(&pb.CallEnded{TaskId: "a", CallId: c.GetCallId(), Attempt: 1, Outcome: pb.Outcome_OUTCOME_RINGING}, now)
	send(&pb.CallEnded{TaskId: "a", Attempt: 1, Outcome: pb.Outcome_OUTCOME_NO_ANSWER}, now)
	send(&pb.CallEnded{CallId: c.GetCallId(), Attempt: 1, Outcome: pb.Outcome_OUTCOME_NO_ANSWER}, now)
	send(&pb.CallEnded{TaskId: "a", CallId: c.GetCallId(), Attempt: 1, Outcome: pb.Outcome_OUTCOME_NO_ANSWER}, now.Add(-48*time.Hour))
	var reasons []string
	for _, d := range h.deadLetters() {
		reasons = append(reasons, d.GetReason())
	}
	want := []deadletter.Reason{deadletter.ReasonInvalidCallEnded, deadletter.ReasonInvalidCallEnded, deadletter.ReasonMissingCallID,
		deadletter.ReasonMissingTaskID, deadletter.ReasonRequestedAtSkew}
	if len(reasons) != len(want) {
		t.Fatalf("dead letters %v, want %v", reasons, want)
	}
	for i := range want {
		if reasons[i] != string(want[i]) {
			t.Fatalf("dead letters %v, want %v", reasons, want)
		}
	}
	h.expectKinds()
	for _, p := range h.state("u1").GetPending() {
		if p.GetAttempt() > 1 {
			t.Fatalf("an invalid report scheduled a retry: %v", p)
		}
	}
}

// The outcome of an attempt the user's value still lists as pending after
// its partition's mark (the tick's mark write was lost in a crash, and the
// call went on): the attempt is recorded as fired with its outcome, the
// retry scheduled, and the replayed tick does not call the attempt again.
func TestOutcomeOfAnAttemptTheMarkDoesNotCover(t *testing.T) {
	h, _ := newPolicyHarness(t, retryPolicy, t0)
	h.onboard("u1", delay("a", time.Minute))
	task := h.task("u1", "a")
	h.clk.Set(t0.Add(2 * time.Minute))
	h.ended(&pb.IVRCall{UserId: "u1", TaskId: "a", CallId: CallID("u1", task), Attempt: 1}, pb.Outcome_OUTCOME_NO_ANSWER)
	h.expectKinds("RETRY(no-answer)")
	st := h.state("u1")
	if len(st.GetFired()) != 1 || st.GetFired()[0].GetTask().GetOutcome() != pb.Outcome_OUTCOME_NO_ANSWER || len(st.GetPending()) != 1 || st.GetPending()[0].GetAttempt() != 2 {
		t.Fatalf("value %v", st)
	}
	h.tickAt(2 * time.Minute)
	h.expectCalls()
	h.tickAt(12 * time.Minute)
	if c := h.expectCalls("a")[0]; c.GetAttempt() != 2 {
		t.Fatalf("attempt %d", c.GetAttempt())
	}
}
