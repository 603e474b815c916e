package scheduler

import (
	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/topology"
)

// settle records in the user's value the follow-ups that ticks fired: those
// at or before the partition's mark, held ones excepted. With fire (in a
// command's or a wake's callback) it also fires what the mark does not
// cover: a follow-up put at or before the mark by the command, or a held
// one, fires now if it is due by this host's clock, and is held otherwise
// (Task.held: the index keeps it as a timer and a tick wakes the user when
// it is due), so a clock behind the one that moved the mark never fires
// early. It reports whether the value changed.
func (s *Scheduler) settle(ctx goka.Context, st *pb.UserState, fire bool) bool {
	keep, fired := s.splitFired(ctx.Partition(), ctx.Key(), st.Pending)
	if !fire {
		if len(fired) == 0 {
			return false
		}
		s.record(st, keep, fired)
		return true
	}
	now := s.cfg.Clock.Now()
	firedAt := timestamppb.New(now)
	changed := false
	var pending []*pb.Task
	var calls []*pb.FiredTask
	place := func(t *pb.Task) {
		t.Held = false
		f := &pb.FiredTask{Task: t, CallId: CallID(ctx.Key(), t), FiredAt: firedAt}
		ctx.Emit(s.cfg.Topics.Calls, ctx.Key(), s.call(st, t, f.CallId, f.FiredAt))
		s.Stats.Fired.Add(1)
		calls = append(calls, f)
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
		sortPending(pending)
		s.record(st, pending, calls)
	}
	return changed
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

// record sets the user's pending follow-ups and appends fired ones to the
// bounded history.
func (s *Scheduler) record(st *pb.UserState, keep []*pb.Task, fired []*pb.FiredTask) {
	st.Pending = keep
	st.Fired = append(st.Fired, fired...)
	if n := len(st.Fired) - s.cfg.FiredHistory; n > 0 {
		st.Fired = append(st.Fired[:0:0], st.Fired[n:]...)
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
	s.record(out, keep, fired)
	return out
}
