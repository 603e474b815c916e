package scheduler

import (
	"fmt"
	"time"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/policy"
	"github.com/ivrsched/ivrsched/internal/suppress"
)

// Retries driven by the call's outcome (see docs/design.md, "Retries"): the
// dialer reports a call's final outcome with a CallEnded command on the
// user's key; the user's callback records it on the attempt in the fired
// history, once, and either schedules the next attempt of the follow-up
// as a pending follow-up of its own (its own call id), which the calling
// policy places like any other, or reports the follow-up's final outcome
// on followup-events.

// callEnded applies a call's final outcome to the user's value and reports
// whether the value changed. An outcome the value already holds is a
// replay (the dialer's callback ran again after a crash) and changes
// nothing, so one outcome never brings two attempts.
func (s *Scheduler) callEnded(ctx goka.Context, st *pb.UserState, e *pb.CallEnded, issued time.Time) (bool, error) {
	f, moved := s.endedAttempt(ctx, st, e.GetCallId())
	if f == nil {
		// Not in the user's recent history: erased and onboarded again, or
		// older than the history keeps.
		s.Stats.EndedUnknown.Add(1)
		s.cfg.Logger.Info("outcome of a call the user's value does not hold: ignored", "user", ctx.Key(), "task", e.GetTaskId(), "call_id", e.GetCallId())
		return moved, nil
	}
	t := f.GetTask()
	if t.GetOutcome() != pb.Outcome_OUTCOME_UNSPECIFIED {
		s.Stats.EndedRepeats.Add(1)
		return moved, nil
	}
	if e.GetOutcome() == pb.Outcome_OUTCOME_SUPPRESSED {
		// The dialer found the number on the do-not-call list just before
		// placing the call: final, never retried.
		t.Outcome = e.GetOutcome()
		reason, ok := suppress.DetailReason(e.GetDetail())
		if !ok {
			reason = e.GetDetail()
		}
		s.reportSuppressed(ctx, ctx.Key(), t, e.GetCallId(), &pb.Suppression{Reason: reason}, timestamppb.New(s.cfg.Clock.Now()))
		return true, nil
	}
	pol := s.policyNow()
	rules := &policy.Retry{}
	if pol != nil {
		rules = pol.RetryFor(t.GetAction().GetCampaignId())
	}
	if !rules.Enabled() && t.GetAttempt() <= 1 {
		return moved, nil // no retries for this follow-up: ivr-results has its outcome
	}
	t.Outcome = e.GetOutcome()
	name := outcomeName(e.GetOutcome())
	final := func(kind pb.ScheduleEvent_Kind, reason, detail string) {
		s.Stats.Ended.Add(1)
		ctx.Emit(s.cfg.Topics.Events, ctx.Key(), &pb.ScheduleEvent{
			UserId: ctx.Key(), TaskId: t.GetTaskId(), Kind: kind, DueAt: t.GetDueAt(), CallId: e.GetCallId(),
			Reason: reason, Detail: fmt.Sprintf("attempt %d ended %s: %s", t.GetAttempt(), name, detail), At: timestamppb.New(s.cfg.Clock.Now()),
		})
	}
	switch {
	case e.GetOutcome() == pb.Outcome_OUTCOME_ANSWERED || e.GetOutcome() == pb.Outcome_OUTCOME_PLACED,
		e.GetOutcome() == pb.Outcome_OUTCOME_OPTED_OUT: // answered, and asked not to be called again
		final(pb.ScheduleEvent_KIND_ANSWERED, name, "done")
	case t.GetCancelled():
		final(pb.ScheduleEvent_KIND_CANCELLED, "cancelled", "cancelled while it was being placed; not retried")
	case !rules.Enabled():
		final(pb.ScheduleEvent_KIND_EXHAUSTED, "retry_off", "the calling policy no longer retries its campaign")
	case t.GetRepeat() != nil || pendingTask(st, t.GetTaskId()) != nil:
		final(pb.ScheduleEvent_KIND_EXHAUSTED, "superseded", "the task id is pending again (a newer follow-up, or the series' next occurrence)")
	default:
		return true, s.retry(ctx, st, t, e, issued, pol, rules, final)
	}
	return true, nil
}

// retry schedules the attempt after t, which ended unanswered (e), under
// the retry rules of its campaign, or reports why there is none. The
// attempt's requested time counts from when the outcome was reported
// (issued); the calling policy then places it like any follow-up.
func (s *Scheduler) retry(ctx goka.Context, st *pb.UserState, t *pb.Task, e *pb.CallEnded, issued time.Time, pol *policy.Policy, rules *policy.Retry,
	final func(pb.ScheduleEvent_Kind, string, string)) error {
	first := firstRequested(t)
	at, stop := rules.Next(policy.Ended{Outcome: outcomeName(e.GetOutcome()), Attempt: int(t.GetAttempt()), CallID: e.GetCallId(), At: issued, First: first})
	switch stop {
	case policy.StopNone:
	case policy.StopMaxAge:
		final(pb.ScheduleEvent_KIND_TOO_OLD, stop.String(), fmt.Sprintf("a retry would come more than %v after the first attempt", rules.MaxAge))
		return nil
	case policy.StopMaxAttempts:
		final(pb.ScheduleEvent_KIND_EXHAUSTED, stop.String(), fmt.Sprintf("%d attempts made, the most the retry rules allow", t.GetAttempt()))
		return nil
	default:
		final(pb.ScheduleEvent_KIND_EXHAUSTED, stop.String(), "the retry rules do not retry this outcome")
		return nil
	}
	if err := checkTime(fmt.Sprintf("task %q retry", t.GetTaskId()), at); err != nil {
		return err
	}
	next := &pb.Task{
		TaskId: t.GetTaskId(), DueAt: timestamppb.New(at), RequestedAt: timestamppb.New(at), Action: t.GetAction(), Payload: t.GetPayload(),
		Attempt: t.GetAttempt() + 1, FirstRequestedAt: timestamppb.New(first),
	}
	deferred, steps, err := s.applyPolicy(pol, st, next, issued)
	if err != nil {
		s.dropTask(ctx, next, err)
		final(pb.ScheduleEvent_KIND_EXHAUSTED, "no_opening", "the calling policy allows no call for a retry")
		return nil
	}
	if due := next.GetDueAt().AsTime(); rules.TooOld(first, due) {
		final(pb.ScheduleEvent_KIND_TOO_OLD, policy.StopMaxAge.String(), fmt.Sprintf("the calling policy puts the retry at %s, more than %v after the first attempt",
			due.UTC().Format(time.RFC3339), rules.MaxAge))
		return nil
	}
	st.Pending = append(st.Pending, next)
	sortPending(st.Pending)
	s.Stats.Retries.Add(1)
	ctx.Emit(s.cfg.Topics.Events, ctx.Key(), &pb.ScheduleEvent{
		UserId: ctx.Key(), TaskId: t.GetTaskId(), Kind: pb.ScheduleEvent_KIND_RETRY, CallId: e.GetCallId(), Reason: outcomeName(e.GetOutcome()),
		RequestedAt: next.GetRequestedAt(), DueAt: next.GetDueAt(), At: timestamppb.New(s.cfg.Clock.Now()),
		Detail: fmt.Sprintf("attempt %d ended %s; attempt %d requested %s", t.GetAttempt(), outcomeName(e.GetOutcome()), next.GetAttempt(), at.UTC().Format(time.RFC3339Nano)),
	})
	if deferred {
		s.reportDeferred(ctx, next, steps)
	}
	return nil
}

// endedAttempt finds the fired follow-up whose call is callID: in the
// fired history, else pending (a tick fired it, and the mark that records
// it was lost in a crash while the call went on: it is recorded as fired
// now, moved reports it).
func (s *Scheduler) endedAttempt(ctx goka.Context, st *pb.UserState, callID string) (f *pb.FiredTask, moved bool) {
	for i := len(st.Fired) - 1; i >= 0; i-- {
		if st.Fired[i].GetCallId() == callID {
			return st.Fired[i], false
		}
	}
	for i, t := range st.Pending {
		if CallID(ctx.Key(), t) != callID {
			continue
		}
		keep := append(st.Pending[:i:i], st.Pending[i+1:]...)
		f := &pb.FiredTask{Task: t, CallId: callID}
		s.record(ctx, st, keep, []*pb.FiredTask{f})
		return f, true
	}
	return nil, false
}

// markCancelled marks the attempts being placed (fired, no outcome yet) of
// task (every task: "") as cancelled, so that their outcomes start no
// retry. It reports whether it marked any.
func markCancelled(st *pb.UserState, task string) bool {
	marked := false
	for _, f := range st.GetFired() {
		t := f.GetTask()
		if (task == "" || t.GetTaskId() == task) && t.GetOutcome() == pb.Outcome_OUTCOME_UNSPECIFIED && !t.GetCancelled() {
			t.Cancelled, marked = true, true
		}
	}
	return marked
}

func pendingTask(st *pb.UserState, task string) *pb.Task {
	for _, t := range st.GetPending() {
		if t.GetTaskId() == task {
			return t
		}
	}
	return nil
}

// firstRequested is when the follow-up's first attempt was requested.
func firstRequested(t *pb.Task) time.Time {
	if t.GetFirstRequestedAt() != nil {
		return t.GetFirstRequestedAt().AsTime()
	}
	return requested(t)
}

// outcomeName is an outcome as the retry rules and followup-events spell it.
func outcomeName(o pb.Outcome) string {
	switch o {
	case pb.Outcome_OUTCOME_NO_ANSWER:
		return "no-answer"
	case pb.Outcome_OUTCOME_BUSY:
		return "busy"
	case pb.Outcome_OUTCOME_FAILED:
		return "failed"
	case pb.Outcome_OUTCOME_MACHINE:
		return "machine"
	case pb.Outcome_OUTCOME_ANSWERED:
		return "answered"
	case pb.Outcome_OUTCOME_CANCELED:
		return "canceled"
	case pb.Outcome_OUTCOME_PLACED:
		return "placed"
	case pb.Outcome_OUTCOME_SUPPRESSED:
		return "suppressed"
	case pb.Outcome_OUTCOME_OPTED_OUT:
		return "opted-out"
	}
	return o.String()
}
