package scheduler

import (
	"errors"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/topology"
)

// settle records in the user's value the follow-ups that ticks fired: those
// at or before the partition's mark, held ones excepted. With fire (in a
// command's or a wake's callback) it also fires what the mark does not
// cover: a follow-up put at or before the mark by the command, or a held
// one, fires now if it is due by this host's clock, and is held otherwise
// (Task.held: the index keeps it as a timer and a tick wakes the user when
// it is due), so a clock behind the one that moved the mark never fires
// early. A recurring follow-up recorded as fired brings its next
// occurrence (successor). It reports whether the value changed.
//
// Without fire, the next occurrence of a series may land at or before the
// mark without having fired; every callback that writes the value
// therefore settles with fire last, which fires or holds it.
func (s *Scheduler) settle(ctx goka.Context, st *pb.UserState, fire bool) bool {
	if !fire {
		return s.recordFired(ctx, st, nil)
	}
	changed := false
	// Each pass fires what is at or before the mark; a next occurrence it
	// brings is later than the one that fired, so a second pass holds or
	// leaves it.
	for pass := 0; pass < 4 && s.settleFire(ctx, st); pass++ {
		changed = true
	}
	return changed
}

// recordFired is settle without fire. A KIND_RECUR wake (w; nil: none)
// gives the follow-up it names its fire time, the tick's, from which the
// series' next occurrence counts (successor): a tick late by more than the
// period fires one call, not every occurrence it missed. A KIND_SUPPRESSED
// wake gives the follow-up it names its fire time and the outcome
// suppressed (markSuppressed), also when a command recorded it as fired
// before the wake came.
func (s *Scheduler) recordFired(ctx goka.Context, st *pb.UserState, w *pb.Wake) bool {
	keep, fired := s.splitFired(ctx.Partition(), ctx.Key(), st.Pending)
	if len(fired) == 0 {
		return w.GetKind() == pb.Wake_KIND_SUPPRESSED && markSuppressed(st.GetFired(), w)
	}
	if (w.GetKind() == pb.Wake_KIND_RECUR || w.GetKind() == pb.Wake_KIND_SUPPRESSED) && w.GetAt() != nil {
		for _, f := range fired {
			if f.GetTask().GetTaskId() == w.GetTaskId() && f.GetTask().GetDueAt().AsTime().Equal(w.GetDueAt().AsTime()) {
				f.FiredAt = w.GetAt()
			}
		}
	}
	if w.GetKind() == pb.Wake_KIND_SUPPRESSED {
		markSuppressed(fired, w)
	}
	s.record(ctx, st, keep, fired)
	return true
}

// markSuppressed gives the fired follow-up a KIND_SUPPRESSED wake names
// (by task and due time, no outcome yet) the outcome suppressed: the tick
// did not call it, and the frequency cap does not count it. It reports
// whether it found one.
func markSuppressed(fired []*pb.FiredTask, w *pb.Wake) bool {
	for _, f := range fired {
		t := f.GetTask()
		if t.GetTaskId() == w.GetTaskId() && t.GetDueAt().AsTime().Equal(w.GetDueAt().AsTime()) && t.GetOutcome() == pb.Outcome_OUTCOME_UNSPECIFIED {
			t.Outcome = pb.Outcome_OUTCOME_SUPPRESSED
			return true
		}
	}
	return false
}

func (s *Scheduler) settleFire(ctx goka.Context, st *pb.UserState) bool {
	keep, fired := s.splitFired(ctx.Partition(), ctx.Key(), st.Pending)
	now := s.cfg.Clock.Now()
	firedAt := timestamppb.New(now)
	pol := s.policyNow()
	mark := s.punct.Index(ctx.Partition())
	changed := false
	var pending []*pb.Task
	var calls []*pb.FiredTask
	// place fires t now, unless the policy changed since t was placed and
	// now makes it wait: then t moves to its new effective time, held if
	// that is still at or before the mark.
	place := func(t *pb.Task) {
		if !mayFire(pol, st, t) {
			deferred, steps, err := s.applyPolicy(pol, st, t, now)
			if err != nil {
				s.dropTask(ctx, t, err)
				return
			}
			if deferred {
				s.reportDeferred(ctx, t, steps)
			}
			if t.GetDueAt().AsTime().After(now) {
				t.Held = mark != nil && mark.Fired(taskPos(ctx.Key(), t))
				pending = append(pending, t)
				return
			}
		}
		t.Held = false
		f := &pb.FiredTask{Task: t, CallId: CallID(ctx.Key(), t), FiredAt: firedAt}
		calls = append(calls, f)
		if e := s.suppressed(ctx, st, t); e != nil {
			t.Outcome = pb.Outcome_OUTCOME_SUPPRESSED // not a call for the frequency cap
			s.reportSuppressed(ctx, ctx.Key(), t, f.CallId, e, firedAt)
			return
		}
		ctx.Emit(s.cfg.Topics.Calls, ctx.Key(), s.call(st, t, f.CallId, f.FiredAt))
		s.Stats.Fired.Add(1)
		s.observeLateness(now, now.Sub(t.GetDueAt().AsTime()).Seconds())
	}
	for _, f := range fired { // at or before the mark, put there by this command
		changed = true
		if f.Task.GetDueAt().AsTime().After(now) {
			f.Task.Held = true
			s.Stats.Held.Add(1)
			pending = append(pending, f.Task)
			continue
		}
		place(f.Task)
	}
	for _, t := range keep {
		if t.GetHeld() && !t.GetDueAt().AsTime().After(now) {
			changed = true
			place(t)
			continue
		}
		pending = append(pending, t)
	}
	if changed {
		s.record(ctx, st, pending, calls)
	}
	return changed
}

// dropTask removes a follow-up the calling policy cannot place (err, a
// *RejectError) and sends it to the dead-letter topic.
func (s *Scheduler) dropTask(ctx goka.Context, t *pb.Task, err error) {
	reason, detail := deadletter.ReasonNoOpening, err.Error()
	var re *RejectError
	if errors.As(err, &re) {
		reason, detail = re.Reason, re.Detail
	}
	s.Stats.Invalid.Add(1)
	s.dlq.Send(ctx, reason, "follow-up not called: "+detail, deadletter.Value(t))
}

// splitFired splits a user's pending follow-ups into those still pending
// and those at or before the partition's mark and not held, which have
// fired.
func (s *Scheduler) splitFired(part int32, user string, pending []*pb.Task) (keep []*pb.Task, fired []*pb.FiredTask) {
	idx := s.punct.Index(part)
	if idx == nil {
		return pending, nil
	}
	for _, t := range pending {
		if t.GetHeld() || !idx.Fired(taskPos(user, t)) {
			keep = append(keep, t)
			continue
		}
		fired = append(fired, &pb.FiredTask{Task: t, CallId: CallID(user, t)})
	}
	return keep, fired
}

// firedKept is how many of the user's last fired follow-ups (oldest first)
// the value keeps: FiredHistory, or more while the calling policy's
// frequency cap counts them (those fired within the cap's longest period,
// up to its largest number of calls), so that a cap of more calls than
// FiredHistory counts every call.
func (s *Scheduler) firedKept(fired []*pb.FiredTask) int {
	calls, per := s.policyNow().CapHistory()
	if calls <= s.cfg.FiredHistory || len(fired) <= s.cfg.FiredHistory {
		return s.cfg.FiredHistory
	}
	since := s.cfg.Clock.Now().Add(-per)
	n := s.cfg.FiredHistory
	for i := len(fired) - 1 - n; i >= 0 && n < calls; i-- {
		at := fired[i].GetTask().GetDueAt().AsTime()
		if fired[i].GetFiredAt() != nil {
			at = fired[i].GetFiredAt().AsTime()
		}
		if at.Before(since) {
			break
		}
		n++
	}
	return n
}

// record sets the user's pending follow-ups and appends fired ones to the
// bounded history; a recurring one that fired brings its next occurrence
// (ctx nil: for display, nothing is reported).
func (s *Scheduler) record(ctx goka.Context, st *pb.UserState, keep []*pb.Task, fired []*pb.FiredTask) {
	st.Pending = keep
	st.Fired = append(st.Fired, fired...)
	if n := len(st.Fired) - s.firedKept(st.Fired); n > 0 {
		st.Fired = append(st.Fired[:0:0], st.Fired[n:]...)
	}
	added := false
	for _, f := range fired {
		if f.GetTask().GetRepeat() == nil {
			continue
		}
		if next := s.successor(ctx, st, f); next != nil {
			st.Pending = append(st.Pending, next)
			added = true
		}
	}
	if added {
		sortPending(st.Pending)
	}
}

// Settled returns a user's value as the user's next command will record it:
// the follow-ups its partition's ticks fired moved from pending to fired. It
// is for display (the web UI's query page) and writes nothing. A value of a
// partition this instance does not own, or a partition's mark, is returned
// as it is.
func (s *Scheduler) Settled(st *pb.UserState) *pb.UserState {
	if st.GetFiredThrough() != nil {
		return st
	}
	part := topology.Partition(st.GetUserId(), max(s.cfg.Partitions, 1))
	out := proto.Clone(st).(*pb.UserState)
	keep, fired := s.splitFired(part, out.GetUserId(), out.GetPending())
	if len(fired) == 0 {
		return st
	}
	s.record(nil, out, keep, fired)
	return out
}
