package scheduler

import (
	"fmt"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/redact"
	"github.com/ivrsched/ivrsched/internal/suppress"
)

// suppressed checks a due follow-up's number against the do-not-call list
// (Config.Suppressions): the entry that keeps it from being called, or nil.
// The list is by number, not by user, so a Forget and a new onboarding do
// not lift it. A list that cannot be read fails the partition (ctx.Fail):
// the input replays rather than a call going out unchecked or a follow-up
// being skipped.
func (s *Scheduler) suppressed(ctx goka.Context, st *pb.UserState, t *pb.Task) *pb.Suppression {
	if s.cfg.Suppressions == nil {
		return nil
	}
	e, err := s.cfg.Suppressions.Check(st.GetPhone(), t.GetAction().GetCampaignId())
	if err != nil {
		ctx.Fail(fmt.Errorf("check the number %s of user %q against the do-not-call list: %w", redact.Phone(st.GetPhone()), st.GetUserId(), err))
	}
	return e
}

// reportSuppressed reports, under the user's key, that follow-up t was not
// called because of entry e (KIND_SUPPRESSED, final for this follow-up).
func (s *Scheduler) reportSuppressed(ctx goka.Context, user string, t *pb.Task, callID string, e *pb.Suppression, at *timestamppb.Timestamp) {
	s.Stats.Suppressed.Add(1)
	ctx.Emit(s.cfg.Topics.Events, user, &pb.ScheduleEvent{
		UserId: user, TaskId: t.GetTaskId(), Kind: pb.ScheduleEvent_KIND_SUPPRESSED, DueAt: t.GetDueAt(), RequestedAt: t.GetRequestedAt(),
		At: at, CallId: callID, Reason: suppress.Reason(e), SuppressedAt: e.GetAddedAt(), SuppressedUntil: e.GetUntil(),
		Detail: "the number is on the do-not-call list: not called",
	})
}
