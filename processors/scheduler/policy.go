package scheduler

import (
	"errors"
	"fmt"
	"time"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/phone"
	"github.com/ivrsched/ivrsched/internal/policy"
)

// The calling policy, applied to a user's follow-ups (see docs/design.md,
// "The calling policy"): a command computes each follow-up's effective time
// (Task.due_at) from its requested time, once; the tick fires at the
// effective time and checks a follow-up again only when the policy changed
// since it was computed (Task.policy_version).

// policyNow is the calling policy in force; nil: none.
func (s *Scheduler) policyNow() *policy.Policy { return s.cfg.Policy() }

// version is a policy's version; "" for no policy.
func version(p *policy.Policy) string {
	if p == nil {
		return ""
	}
	return p.Version()
}

// requested is the time a follow-up was asked for, before the policy moved
// it (values written before calling policies have only due_at).
func requested(t *pb.Task) time.Time {
	if t.GetRequestedAt() != nil {
		return t.GetRequestedAt().AsTime()
	}
	return t.GetDueAt().AsTime()
}

// userZones are the zones the user's calling windows are read in: the
// user's time zone, else the phone number's zones (read at onboarding; a
// value written before that has none, and the number is read again).
func userZones(st *pb.UserState) ([]*time.Location, error) {
	n := phone.Number{E164: st.GetPhone(), Region: st.GetRegion(), Zones: st.GetPhoneZones()}
	if st.GetTimeZone() == "" && len(n.Zones) == 0 && st.GetPhone() != "" {
		parsed, err := phone.Parse(st.GetPhone())
		if err != nil {
			return nil, err
		}
		n = parsed
	}
	return phone.Zones(st.GetTimeZone(), n)
}

// request is the policy's view of a call of task t to user st due at due.
func request(p *policy.Policy, st *pb.UserState, zones []*time.Location, t *pb.Task, due time.Time) policy.Request {
	r := policy.Request{Due: due, Zones: zones, Region: st.GetRegion(), Campaign: t.GetAction().GetCampaignId()}
	rules := p.RulesFor(r.Campaign)
	if *rules.Spread > 0 || rules.Cap.Calls > 0 {
		r.CallID = CallID(st.GetUserId(), t)
	}
	if rules.Cap.Calls > 0 {
		r.Recent = recentCalls(st, t.GetTaskId())
	}
	return r
}

// recentCalls are the user's calls for the frequency cap: the fired ones
// the value remembers (at the time they fired), except those not called
// because the number is on the do-not-call list (outcome suppressed), and
// the other pending follow-ups (at their effective times).
func recentCalls(st *pb.UserState, except string) []policy.Call {
	out := make([]policy.Call, 0, len(st.GetFired())+len(st.GetPending()))
	for _, f := range st.GetFired() {
		if f.GetTask().GetOutcome() == pb.Outcome_OUTCOME_SUPPRESSED {
			continue
		}
		at := f.GetTask().GetDueAt().AsTime()
		if f.GetFiredAt() != nil {
			at = f.GetFiredAt().AsTime()
		}
		out = append(out, policy.Call{ID: f.GetCallId(), At: at})
	}
	for _, t := range st.GetPending() {
		if t.GetTaskId() != except {
			out = append(out, policy.Call{ID: CallID(st.GetUserId(), t), At: t.GetDueAt().AsTime()})
		}
	}
	return out
}

// effective is where policy p puts task t of user st: the first instant at
// or after its requested time that p allows. A requested time before from
// (when the command was issued, or when a tick found that the follow-up
// must wait) would fire at once: it keeps its time if p allows a call at
// from, else it moves to the first instant after from that p allows.
// Computed from the command's times, not the clock, a replay gets the
// same answer.
func effective(p *policy.Policy, st *pb.UserState, t *pb.Task, from time.Time) (policy.Result, error) {
	req := requested(t)
	if p == nil {
		return policy.Result{At: req}, nil
	}
	zones, err := userZones(st)
	if err != nil {
		return policy.Result{}, err
	}
	due := req
	if due.Before(from) {
		due = from
	}
	r, err := p.Effective(request(p, st, zones, t, due))
	if err != nil {
		return policy.Result{}, err
	}
	if due.After(req) && r.At.Equal(due) {
		return policy.Result{At: req}, nil // fires at once, as it asked
	}
	return r, nil
}

// applyPolicy sets task t's effective time under policy p, from its
// requested time (see effective). It reports whether the policy moved the
// follow-up to a new time, for reportDeferred, and the policy's steps
// (the rules that moved it, for the report). An error is a *RejectError.
func (s *Scheduler) applyPolicy(p *policy.Policy, st *pb.UserState, t *pb.Task, from time.Time) (deferred bool, steps []*pb.PolicyStep, err error) {
	if t.GetRequestedAt() == nil {
		t.RequestedAt = t.GetDueAt()
	}
	r, err := effective(p, st, t, from)
	if err != nil {
		return false, nil, policyReject(t, err)
	}
	moved := !r.At.Equal(t.GetDueAt().AsTime())
	t.PolicyVersion = version(p)
	t.Deferred, t.Blackout = "", ""
	if !r.At.Equal(requested(t)) {
		t.Deferred, t.Blackout = r.Reason.String(), r.Blackout
	}
	if moved {
		t.DueAt = timestamppb.New(r.At)
	}
	return moved && t.Deferred != "", policySteps(r.Steps), nil
}

// policySteps are the policy's steps as reports carry them.
func policySteps(steps []policy.Step) []*pb.PolicyStep {
	if len(steps) == 0 {
		return nil
	}
	out := make([]*pb.PolicyStep, len(steps))
	for i, st := range steps {
		out[i] = &pb.PolicyStep{Rule: st.Reason.String(), From: timestamppb.New(st.From), To: timestamppb.New(st.To), Blackout: st.Blackout}
	}
	return out
}

// reportDeferred reports a follow-up the policy moved on followup-events,
// with the steps that moved it (ctx nil: only counts it).
func (s *Scheduler) reportDeferred(ctx goka.Context, t *pb.Task, steps []*pb.PolicyStep) {
	s.Stats.Deferred.Add(1)
	if ctx == nil {
		return
	}
	ctx.Emit(s.cfg.Topics.Events, ctx.Key(), &pb.ScheduleEvent{
		UserId: ctx.Key(), TaskId: t.GetTaskId(), Kind: pb.ScheduleEvent_KIND_DEFERRED,
		RequestedAt: t.GetRequestedAt(), DueAt: t.GetDueAt(), Reason: t.GetDeferred(), Blackout: t.GetBlackout(),
		At: timestamppb.New(s.cfg.Clock.Now()), Detail: deferDetail(t), Steps: steps, PolicyVersion: t.GetPolicyVersion(),
	})
}

// reportAdvanced reports a deferred follow-up that the policy in force
// moved earlier (KIND_ADVANCED), with the steps that still move it.
func (s *Scheduler) reportAdvanced(ctx goka.Context, t *pb.Task, steps []*pb.PolicyStep) {
	s.Stats.Advanced.Add(1)
	ctx.Emit(s.cfg.Topics.Events, ctx.Key(), &pb.ScheduleEvent{
		UserId: ctx.Key(), TaskId: t.GetTaskId(), Kind: pb.ScheduleEvent_KIND_ADVANCED,
		RequestedAt: t.GetRequestedAt(), DueAt: t.GetDueAt(), Reason: t.GetDeferred(), Blackout: t.GetBlackout(),
		At: timestamppb.New(s.cfg.Clock.Now()), Detail: deferDetail(t), Steps: steps, PolicyVersion: t.GetPolicyVersion(),
	})
}

func deferDetail(t *pb.Task) string {
	d := fmt.Sprintf("requested %s, effective %s", t.GetRequestedAt().AsTime().UTC().Format(time.RFC3339), t.GetDueAt().AsTime().UTC().Format(time.RFC3339))
	if t.GetBlackout() != "" {
		d += ", blackout " + t.GetBlackout()
	}
	return d + ", policy " + t.GetPolicyVersion()
}

// policyReject turns an error of the policy into the dead-letter reason
// that says what to fix.
func policyReject(t *pb.Task, err error) error {
	switch {
	case errors.Is(err, policy.ErrNoOpening):
		return reject(deadletter.ReasonNoOpening, "task %q requested %s: %v", t.GetTaskId(), requested(t).UTC().Format(time.RFC3339), err)
	case errors.Is(err, phone.ErrInvalid):
		return reject(deadletter.ReasonInvalidPhone, "task %q: %v", t.GetTaskId(), err)
	case errors.Is(err, phone.ErrNoZone):
		return reject(deadletter.ReasonNoTimeZone, "task %q: %v", t.GetTaskId(), err)
	case errors.Is(err, phone.ErrUnknownZone):
		return reject(deadletter.ReasonUnknownTimeZone, "task %q: %v", t.GetTaskId(), err)
	}
	return reject(deadletter.ReasonNoOpening, "task %q: %v", t.GetTaskId(), err)
}

// mayFire reports whether a due follow-up may fire now under policy p: it
// was computed under p, or p allows a call at its effective time. The
// tick asks this of every follow-up it fires; only one computed under
// another policy costs an Effective (about 0.3 µs).
func mayFire(p *policy.Policy, st *pb.UserState, t *pb.Task) bool {
	if p == nil || t.GetPolicyVersion() == p.Version() {
		return true
	}
	zones, err := userZones(st)
	if err != nil {
		return false // the user's callback finds out why and dead-letters it
	}
	due := t.GetDueAt().AsTime()
	r, err := p.Effective(request(p, st, zones, t, due))
	return err == nil && r.At.Equal(due)
}
