package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // time zones validate the same on every host

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/phone"
	"github.com/ivrsched/ivrsched/topology"
)

// HeaderForwarded marks a command the scheduler forwarded to its user's
// partition; its value is the original topic/partition/offset.
const HeaderForwarded = "ivrsched-forwarded-from"

// onCommand applies an onboard, cancel, reschedule, forget or call-ended
// command. Invalid commands go to the dead-letter topic; a valid command
// that arrived on another partition than its user's is forwarded there.
func (s *Scheduler) onCommand(ctx goka.Context, msg any) {
	s.Stats.Commands.Add(1)
	cmd, ok := msg.(*pb.Command)
	if !ok {
		s.rejectRecord(ctx, msg, reject(deadletter.ReasonUndecodable, "%v", undecodable(msg)))
		return
	}
	c, err := validate(ctx.Key(), cmd, ctx.Timestamp(), s.cfg.Limits)
	issued := c.issued
	if err != nil {
		s.rejectRecord(ctx, cmd, err)
		return
	}
	if s.misrouted(ctx) {
		if _, again := ctx.Headers()[HeaderForwarded]; again {
			s.rejectRecord(ctx, cmd, reject(deadletter.ReasonMisroutedForward, "forwarded record is on partition %d, its key belongs on %d: partition counts differ?",
				ctx.Partition(), topology.Partition(ctx.Key(), s.cfg.Partitions)))
			return
		}
		s.forward(ctx, cmd, issued)
		return
	}
	if _, ok := cmd.GetCommand().(*pb.Command_Forget); ok {
		s.forget(ctx)
		return
	}
	st, first, err := s.state(ctx)
	if err != nil {
		// The stored bytes stay as they are; a Forget still erases them.
		s.rejectRecord(ctx, cmd, err)
		return
	}
	if _, ended := cmd.GetCommand().(*pb.Command_CallEnded); ended && first {
		// The user was forgotten (or expired) since the call: nothing more
		// is dialed, and no value is made for the user.
		s.Stats.EndedUnknown.Add(1)
		return
	}
	if first {
		// Its place in the partition's order, which the value's calls carry
		// (see forget).
		st.CreatedOffset = ctx.Offset() + 1
	}
	// What ticks fired is recorded first, so that a late cancel or
	// reschedule of it is reported as too late.
	changed := s.settle(ctx, st, false)
	switch cc := cmd.GetCommand().(type) {
	case *pb.Command_Onboard:
		if err := s.onboard(ctx, st, cc.Onboard, c, first); err != nil {
			s.rejectRecord(ctx, cmd, err)
			return
		}
		changed = true
	case *pb.Command_Cancel:
		changed = s.cancel(ctx, st, cc.Cancel.GetTaskId()) || changed
	case *pb.Command_CallEnded:
		ended, err := s.callEnded(ctx, st, cc.CallEnded, issued)
		if err != nil {
			s.rejectRecord(ctx, cmd, err)
			return
		}
		changed = ended || changed
	case *pb.Command_Reschedule:
		moved, err := s.reschedule(ctx, st, cc.Reschedule, issued)
		if err != nil {
			s.rejectRecord(ctx, cmd, err)
			return
		}
		changed = moved || changed
	case *pb.Command_RunNow:
		changed = s.runNow(ctx, st, cc.RunNow.GetTaskId(), issued) || changed
	}
	// A follow-up now scheduled at or before the fired mark would never be
	// fired by a tick: it fires here, or is held until it is due.
	changed = s.settle(ctx, st, true) || changed
	if changed {
		st.UpdatedAt = timestamppb.New(issued)
		if err := s.write(ctx, st); err != nil {
			s.rejectRecord(ctx, cmd, err)
		}
	}
}

// forget erases the user: the value goes (a tombstone on the changelog; the
// storage wrapper drops its follow-ups from the due index), whatever it
// held, even bytes that do not decode. KIND_FORGOTTEN tells the dialer to
// forget the user too, with the Forget's onboarding offset.
func (s *Scheduler) forget(ctx goka.Context) {
	detail := "erased"
	place := ctx.Offset() + 1
	if ctx.Value() == nil {
		detail = "no such user"
	} else {
		if st, ok := ctx.Value().(*pb.UserState); ok {
			if st.GetCreatedOffset() > ctx.Offset() {
				// Created at a later offset than this Forget's: before the
				// onboarding offsets started again (the topic recreated or
				// truncated), or by a later command (this Forget replayed
				// after a crash). Its calls' places and this Forget's are
				// not in one order: the Forget carries none, and the dialer
				// drops every call of the user while it is recent (in the
				// second case, calls of that later command too: a call
				// lost rather than an erased user called).
				place = 0
			}
			// A pending retry's follow-up ends here: its final outcome.
			keep, _ := s.splitFired(ctx.Partition(), ctx.Key(), st.GetPending())
			for _, t := range keep {
				if t.GetAttempt() > 1 {
					s.event(ctx, pb.ScheduleEvent_KIND_CANCELLED, t.GetTaskId(), t.GetDueAt(), "", "forgotten")
				}
			}
		}
		ctx.Delete()
	}
	s.Stats.Forgotten.Add(1)
	// The dialer drops the user's calls fired from a value created before
	// this Forget (IVRCall.created_offset below forget_offset): the
	// onboarding partition's order decides, not the clocks of the hosts
	// that fired them and that process the Forget.
	ctx.Emit(s.cfg.Topics.Events, ctx.Key(), &pb.ScheduleEvent{UserId: ctx.Key(), Kind: pb.ScheduleEvent_KIND_FORGOTTEN,
		At: timestamppb.New(s.cfg.Clock.Now()), Detail: detail, ForgetOffset: place})
}

// misrouted reports a record whose key belongs on another partition, as
// happens when the producer used another partitioner than murmur2.
func (s *Scheduler) misrouted(ctx goka.Context) bool {
	return s.cfg.Partitions > 1 && topology.Partition(ctx.Key(), s.cfg.Partitions) != ctx.Partition()
}

// forward re-produces cmd to its user's partition of the same topic, keeping
// the time it was issued so its due times do not move.
func (s *Scheduler) forward(ctx goka.Context, cmd *pb.Command, issued time.Time) {
	if cmd.GetRequestedAt() == nil {
		cmd.RequestedAt = timestamppb.New(issued)
	}
	h := goka.Headers{}
	for k, v := range ctx.Headers() {
		h[k] = v
	}
	h[HeaderForwarded] = []byte(fmt.Sprintf("%s/%d/%d", ctx.Topic(), ctx.Partition(), ctx.Offset()))
	ctx.Emit(s.cfg.Topics.Onboarding, ctx.Key(), cmd, goka.WithCtxEmitHeaders(h))
	s.Stats.Forwarded.Add(1)
}

func undecodable(msg any) any {
	if u, ok := msg.(*codec.Undecodable); ok {
		return u.Err
	}
	return fmt.Sprintf("unexpected %T", msg)
}

// rejectRecord sends the record being processed to the dead-letter topic.
func (s *Scheduler) rejectRecord(ctx goka.Context, msg any, err error) {
	s.Stats.Invalid.Add(1)
	reason, detail := deadletter.ReasonUndecodable, err.Error()
	var re *RejectError
	if errors.As(err, &re) {
		reason, detail = re.Reason, re.Detail
	}
	s.dlq.Send(ctx, reason, detail, deadletter.Value(msg))
}

// onboard applies an Onboard to the user's value. first is a user with no
// value yet: only then does an Onboard without follow-ups get the default
// follow-up (a later one updates the phone or time zone and calls no one).
// Each follow-up gets its effective time under the calling policy in
// force; a change of the user's zones moves the pending ones again.
func (s *Scheduler) onboard(ctx goka.Context, st *pb.UserState, o *pb.Onboard, c checked, first bool) error {
	issued := c.issued
	base := issued
	zonesBefore := zoneKey(st)
	if n := c.number; n != nil {
		st.Phone, st.Region, st.PhoneZones = n.E164, n.Region, n.Zones
	}
	if st.GetPhone() == "" {
		return reject(deadletter.ReasonMissingPhone, "user %q has no phone number", st.GetUserId())
	}
	if o.GetTimeZone() != "" {
		st.TimeZone = o.GetTimeZone()
	}
	if st.GetRegion() == "" { // a value written before the numbering plan was read
		n, err := phone.Parse(st.GetPhone())
		if err != nil {
			return reject(deadletter.ReasonInvalidPhone, "stored %v", err)
		}
		st.Region, st.PhoneZones = n.Region, n.Zones
	}
	if _, err := userZones(st); err != nil {
		return reject(deadletter.ReasonNoTimeZone, "user %q: %v; give the user's time_zone", st.GetUserId(), err)
	}
	if o.GetOnboardedAt() != nil {
		st.OnboardedAt = o.GetOnboardedAt()
		base = o.GetOnboardedAt().AsTime()
	}
	follow := o.GetFollowUps()
	if len(follow) == 0 && first {
		d := s.cfg.Default
		follow = []*pb.FollowUp{{TaskId: d.TaskID, When: &pb.FollowUp_Delay{Delay: durationpb.New(d.Delay)}, Action: d.Action}}
		// An old onboarded_at can put the default follow-up out of bounds.
		if err := checkDue(d.TaskID, follow[0].GetDelay(), nil, base, issued, s.cfg.Limits); err != nil {
			return err
		}
	}
	pol := s.policyNow()
	type deferral struct {
		t     *pb.Task
		steps []*pb.PolicyStep
	}
	var deferred []deferral
	if !first && zoneKey(st) != zonesBefore { // the windows are read elsewhere now
		for _, t := range st.Pending {
			if t.GetHeld() {
				continue
			}
			moved, steps, err := s.applyPolicy(pol, st, t, issued)
			if err != nil {
				return err
			}
			if moved {
				deferred = append(deferred, deferral{t, steps})
			}
		}
	}
	ix := newPendingIndex(st.Pending)
	for i, f := range follow {
		due := timestamppb.New(dueTime(f.GetDelay(), f.GetDueAt(), base))
		t := &pb.Task{TaskId: taskID(f, i), DueAt: due, RequestedAt: due, Action: f.GetAction(), Payload: f.GetPayload(), Attempt: 1}
		if r := f.GetRepeat(); r != nil {
			t.Repeat, t.Occurrence, t.SeriesStart = r, 1, due
		}
		// In command order: the frequency cap counts the follow-ups placed
		// before this one.
		moved, steps, err := s.applyPolicy(pol, st, t, issued)
		if err != nil {
			return err
		}
		if moved {
			deferred = append(deferred, deferral{t, steps})
		}
		st.Pending = ix.upsert(st.Pending, t)
		s.Stats.Scheduled.Add(1)
	}
	if n, limit := len(st.Pending), s.cfg.Limits.MaxPending; limit > 0 && n > limit {
		return reject(deadletter.ReasonTooManyPending, "user %q would have %d follow-ups pending, limit %d", st.GetUserId(), n, limit)
	}
	if err := s.fits(st); err != nil {
		return err // before anything is reported or fired
	}
	sortPending(st.Pending)
	for _, d := range deferred {
		s.reportDeferred(ctx, d.t, d.steps)
	}
	return nil
}

// zoneKey identifies where a user's calling windows are read.
func zoneKey(st *pb.UserState) string {
	return st.GetTimeZone() + "|" + st.GetRegion() + "|" + strings.Join(st.GetPhoneZones(), ",")
}

// pendingIndex maps the task ids of pending follow-ups to their places.
type pendingIndex map[string]int

func newPendingIndex(p []*pb.Task) pendingIndex {
	ix := make(pendingIndex, len(p))
	for i, t := range p {
		ix[t.GetTaskId()] = i
	}
	return ix
}

// upsert replaces the pending follow-up with t's task id by t, or appends t.
func (ix pendingIndex) upsert(p []*pb.Task, t *pb.Task) []*pb.Task {
	if i, ok := ix[t.GetTaskId()]; ok {
		p[i] = t
		return p
	}
	ix[t.GetTaskId()] = len(p)
	return append(p, t)
}

// cancel reports whether the state changed. Attempts being placed (fired,
// their outcome not reported yet) of the cancelled tasks are marked, so
// that their outcomes start no retry.
func (s *Scheduler) cancel(ctx goka.Context, st *pb.UserState, task string) bool {
	if task == "" {
		for _, t := range st.Pending {
			s.event(ctx, pb.ScheduleEvent_KIND_CANCELLED, t.GetTaskId(), t.GetDueAt(), "", "")
			s.Stats.Cancelled.Add(1)
		}
		marked := markCancelled(st, "")
		if len(st.Pending) == 0 {
			s.event(ctx, pb.ScheduleEvent_KIND_UNKNOWN_TASK, "", nil, "", "no pending follow-ups to cancel")
			return marked
		}
		st.Pending = nil
		return true
	}
	for i, t := range st.Pending {
		if t.GetTaskId() == task {
			st.Pending = append(st.Pending[:i], st.Pending[i+1:]...)
			s.event(ctx, pb.ScheduleEvent_KIND_CANCELLED, task, t.GetDueAt(), "", "")
			s.Stats.Cancelled.Add(1)
			markCancelled(st, task)
			return true
		}
	}
	s.notPending(ctx, st, task)
	return markCancelled(st, task)
}

// reschedule reports whether the state changed. The follow-up's new time
// is requested, and placed by the calling policy in force.
func (s *Scheduler) reschedule(ctx goka.Context, st *pb.UserState, r *pb.Reschedule, issued time.Time) (bool, error) {
	due := timestamppb.New(dueTime(r.GetDelay(), r.GetDueAt(), issued))
	for _, t := range st.Pending {
		if t.GetTaskId() != r.GetTaskId() {
			continue
		}
		t.DueAt, t.RequestedAt = due, due
		t.Held = false // settle holds it again if it is still at or before the mark
		if t.GetRepeat() != nil && t.GetOccurrence() <= 1 {
			t.SeriesStart = due // the series starts at its first occurrence
		}
		deferred, steps, err := s.applyPolicy(s.policyNow(), st, t, issued)
		if err != nil {
			return false, err // the command is dead-lettered; the value is not written
		}
		sortPending(st.Pending)
		s.event(ctx, pb.ScheduleEvent_KIND_RESCHEDULED, t.GetTaskId(), t.GetRequestedAt(), "", "")
		if deferred {
			s.reportDeferred(ctx, t, steps)
		}
		s.Stats.Rescheduled.Add(1)
		return true, nil
	}
	s.notPending(ctx, st, r.GetTaskId())
	return false, nil
}

// notPending reports a cancel or reschedule of a task that is not pending:
// too late if it fired recently, unknown otherwise.
func (s *Scheduler) notPending(ctx goka.Context, st *pb.UserState, task string) {
	for i := len(st.Fired) - 1; i >= 0; i-- {
		f := st.Fired[i]
		if f.GetTask().GetTaskId() == task {
			detail := "fired at its due time or later"
			if f.GetFiredAt() != nil {
				detail = fmt.Sprintf("fired at %s", f.GetFiredAt().AsTime().Format(time.RFC3339Nano))
			}
			s.event(ctx, pb.ScheduleEvent_KIND_TOO_LATE, task, f.GetTask().GetDueAt(), f.GetCallId(), detail)
			return
		}
	}
	s.event(ctx, pb.ScheduleEvent_KIND_UNKNOWN_TASK, task, nil, "", "no such pending follow-up")
}

func (s *Scheduler) event(ctx goka.Context, kind pb.ScheduleEvent_Kind, task string, due *timestamppb.Timestamp, callID, detail string) {
	ctx.Emit(s.cfg.Topics.Events, ctx.Key(), &pb.ScheduleEvent{
		UserId: ctx.Key(), TaskId: task, Kind: kind, DueAt: due, At: timestamppb.New(s.cfg.Clock.Now()), Detail: detail, CallId: callID,
	})
}
