package dialer

import (
	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// reportEnded tells the scheduler a call's final outcome (a CallEnded
// command on the onboarding topic, keyed by the user) while the calling
// policy retries any outcome: the scheduler then calls the follow-up again
// or reports its final outcome (docs/design.md, "Retries"). It runs in the
// loop callback that made the outcome final, so the command is produced
// with the outcome's record and committed with it; a crash before the
// commit replays the status and sends the command again, which the
// scheduler recognizes (the attempt already holds its outcome).
//
// The command's requested_at is the status record's timestamp (when
// ivrsched received the outcome, the same on every replay), from which the
// retry's delay counts; the scheduler checks it against the onboarding
// record's time like any producer's.
//
// A call not placed because its number is on the do-not-call list
// (OUTCOME_SUPPRESSED) is reported whatever the policy, for the scheduler
// to report the follow-up KIND_SUPPRESSED on followup-events.
func (d *Dialer) reportEnded(ctx goka.Context, res *pb.CallResult) {
	retries := d.cfg.Policy != nil && d.cfg.Policy().Retries()
	if (!retries && res.GetOutcome() != pb.Outcome_OUTCOME_SUPPRESSED) || res.GetTaskId() == "" {
		return
	}
	at := ctx.Timestamp()
	if at.Unix() <= 0 { // a record without a timestamp (Goka's tester)
		at = d.cfg.Clock.Now()
	}
	ctx.Emit(d.cfg.Topics.Onboarding, ctx.Key(), &pb.Command{UserId: ctx.Key(), RequestedAt: timestamppb.New(at),
		Command: &pb.Command_CallEnded{CallEnded: &pb.CallEnded{TaskId: res.GetTaskId(), CallId: res.GetCallId(),
			Attempt: max(res.GetAttempt(), 1), Outcome: res.GetOutcome(), Detail: res.GetDetail()}}})
	d.Stats.Reported.Add(1)
}
