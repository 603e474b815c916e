package scheduler

import (
	"time"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// runNow moves the user's pending follow-up task to the command's issue
// time, past the calling policy (an operator's explicit action): its
// policy_version becomes the version in force, so the tick fires it without
// checking it again, and the command's settle fires it at once when it now
// lies at or before the fired mark. Its requested time, and so its call id,
// stay. It reports whether the value changed.
func (s *Scheduler) runNow(ctx goka.Context, st *pb.UserState, task string, issued time.Time) bool {
	for _, t := range st.Pending {
		if t.GetTaskId() != task {
			continue
		}
		if t.GetRequestedAt() == nil {
			t.RequestedAt = t.GetDueAt()
		}
		t.DueAt = timestamppb.New(issued)
		t.Held = false // settle holds it if it is at or before the mark and not due by this clock
		t.Deferred, t.Blackout = "", ""
		t.PolicyVersion = version(s.policyNow())
		sortPending(st.Pending)
		ctx.Emit(s.cfg.Topics.Events, ctx.Key(), &pb.ScheduleEvent{
			UserId: ctx.Key(), TaskId: task, Kind: pb.ScheduleEvent_KIND_RUN_NOW, DueAt: t.GetDueAt(), RequestedAt: t.GetRequestedAt(),
			At: timestamppb.New(s.cfg.Clock.Now()), Detail: "run now",
		})
		s.Stats.Rescheduled.Add(1)
		return true
	}
	s.notPending(ctx, st, task)
	return false
}
