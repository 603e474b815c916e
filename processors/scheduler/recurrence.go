package scheduler

import (
	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/processors/scheduler/recur"
)

// maxSkipped bounds the occurrences successor skips: a series cannot have
// more (recur.MaxCount), and a cron every minute deferred for the longest
// blackout skips fewer.
const maxSkipped = recur.MaxCount + 1

// successor is the next occurrence of a recurring follow-up that fired (f),
// under the same task id, placed by the calling policy: the first
// occurrence of the series requested after the time f fired (occurrences
// that fell while f waited for the policy are skipped; they count toward
// the series' count), or nil when the series is over. Occurrences are
// counted from the requested times (recur.Next), so deferrals do not make
// a series drift. It runs in the user's callback (ctx nil: for display,
// nothing is reported), from the recorded value only, so a replay computes
// the same occurrence.
func (s *Scheduler) successor(ctx goka.Context, st *pb.UserState, f *pb.FiredTask) *pb.Task {
	t := f.GetTask()
	rec, err := repeatOf(t.GetTaskId(), t.GetRepeat())
	if err != nil { // checked when the command was accepted
		s.cfg.Logger.Error("recurring follow-up with an invalid repeat: series ended", "user", st.GetUserId(), "task", t.GetTaskId(), "err", err)
		return nil
	}
	zones, err := userZones(st)
	if err != nil {
		if ctx != nil {
			s.dropTask(ctx, t, policyReject(t, err))
		}
		return nil
	}
	after := t.GetDueAt().AsTime()
	if f.GetFiredAt() != nil {
		after = f.GetFiredAt().AsTime()
	}
	first := requested(t)
	if t.GetSeriesStart() != nil {
		first = t.GetSeriesStart().AsTime()
	}
	prev, n := requested(t), max(int(t.GetOccurrence()), 1)
	for skipped := 0; ; skipped++ {
		next, ok := rec.Next(first, prev, n, zones[0])
		if !ok || skipped > maxSkipped {
			return nil
		}
		n++
		if next.After(after) {
			prev = next
			break
		}
		prev = next
	}
	due := timestamppb.New(prev)
	next := &pb.Task{
		TaskId: t.GetTaskId(), DueAt: due, RequestedAt: due, Action: t.GetAction(), Payload: t.GetPayload(), Attempt: 1,
		Repeat: t.GetRepeat(), Occurrence: uint32(n), SeriesStart: timestamppb.New(first),
	}
	deferred, steps, err := s.applyPolicy(s.policyNow(), st, next, after)
	if err != nil {
		if ctx != nil {
			s.dropTask(ctx, next, err)
		}
		return nil
	}
	if deferred && ctx != nil {
		s.reportDeferred(ctx, next, steps)
	}
	return next
}
