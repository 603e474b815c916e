package scheduler

import (
	"time"

	"github.com/lovoo/goka"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
)

// onWake handles what a tick asks of a user, in the callback of its user's
// key, which alone may write the user's value: a held follow-up fires once
// it is due by this host's clock; a user with nothing pending whose
// retention has passed is removed (a tombstone) and reported as
// KIND_EXPIRED, so the dialer forgets the user too; a follow-up the tick
// parked because the calling policy changed moves to its new effective
// time (KIND_DEFERRED); a recurring follow-up that fired is recorded and
// its next occurrence scheduled (settle); one the tick did not call
// because its number is on the do-not-call list is recorded as fired with
// the outcome suppressed, which the frequency cap does not count. A wake that no longer applies
// (the user changed since) writes the value back as it is, which puts what
// is still to come back into the due index and releases what the index
// parked.
func (s *Scheduler) onWake(ctx goka.Context, msg any) {
	w, ok := msg.(*pb.Wake)
	if !ok {
		s.rejectRecord(ctx, msg, reject(deadletter.ReasonUndecodable, "wake: %v", undecodable(msg)))
		return
	}
	st, first, err := s.state(ctx)
	switch {
	case first:
		return // forgotten or expired since
	case err != nil:
		s.rejectRecord(ctx, w, err)
		return
	}
	s.recordFired(ctx, st, w)
	if w.GetKind() == pb.Wake_KIND_RETENTION && s.expired(st) {
		ctx.Delete() // the storage wrapper drops the user from the due index
		s.Stats.Expired.Add(1)
		s.event(ctx, pb.ScheduleEvent_KIND_EXPIRED, "", nil, "", "nothing pending and no activity for "+s.cfg.Retain.String())
		return
	}
	if w.GetKind() == pb.Wake_KIND_POLICY {
		s.wakeParked(ctx, st, w)
	}
	s.settle(ctx, st, true)
	// The storage wrapper puts what is still to come back into the due index.
	if err := s.write(ctx, st); err != nil {
		s.rejectRecord(ctx, w, err)
	}
}

// wakeParked moves the follow-up a tick parked, or one a tick's sweep
// found the policy in force would call earlier (sweepDeferred), to its
// effective time under that policy, counted from the tick's time (the
// Wake's, so a replay computes the same). A follow-up that
// changed since (moved, cancelled) is left as it is. One the policy allows
// no call any more goes to the dead-letter topic.
func (s *Scheduler) wakeParked(ctx goka.Context, st *pb.UserState, w *pb.Wake) {
	for i, t := range st.Pending {
		if t.GetTaskId() != w.GetTaskId() || t.GetHeld() || !t.GetDueAt().AsTime().Equal(w.GetDueAt().AsTime()) {
			continue
		}
		was := t.GetDueAt().AsTime()
		deferred, steps, err := s.applyPolicy(s.policyNow(), st, t, w.GetAt().AsTime())
		if err != nil {
			st.Pending = append(st.Pending[:i:i], st.Pending[i+1:]...)
			s.dropTask(ctx, t, err)
			return
		}
		switch {
		case t.GetDueAt().AsTime().Before(was):
			s.reportAdvanced(ctx, t, steps)
		case deferred:
			s.reportDeferred(ctx, t, steps)
		}
		sortPending(st.Pending)
		return
	}
}

// expired reports a user with nothing pending whose last due time and last
// command are at least the retention ago.
func (s *Scheduler) expired(st *pb.UserState) bool {
	return s.cfg.Retain > 0 && len(st.GetPending()) == 0 &&
		!time.Unix(0, lastActive(st)).Add(s.cfg.Retain).After(s.cfg.Clock.Now())
}
