package scheduler

import (
	"time"

	"github.com/lovoo/goka"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/deadletter"
)

// onWake handles a timer a tick found due, in the callback of its user's
// key, which alone may write the user's value: a held follow-up fires once
// it is due by this host's clock; a user with nothing pending whose
// retention has passed is removed (a tombstone) and reported as
// KIND_EXPIRED, so the dialer forgets the user too. A wake that no longer
// applies (the user changed since) writes the value back as it is, which
// puts what is still to come back into the due index.
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
	s.settle(ctx, st, false)
	if w.GetKind() == pb.Wake_KIND_RETENTION && s.expired(st) {
		ctx.Delete() // the storage wrapper drops the user from the due index
		s.Stats.Expired.Add(1)
		s.event(ctx, pb.ScheduleEvent_KIND_EXPIRED, "", nil, "", "nothing pending and no activity for "+s.cfg.Retain.String())
		return
	}
	s.settle(ctx, st, true)
	ctx.SetValue(st) // the storage wrapper puts what is still to come back into the due index
}

// expired reports a user with nothing pending whose last due time and last
// command are at least the retention ago.
func (s *Scheduler) expired(st *pb.UserState) bool {
	return s.cfg.Retain > 0 && len(st.GetPending()) == 0 &&
		!time.Unix(0, lastActive(st)).Add(s.cfg.Retain).After(s.cfg.Clock.Now())
}
