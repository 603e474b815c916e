package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/phone"
	"github.com/ivrsched/ivrsched/processors/scheduler/recur"
	"github.com/ivrsched/ivrsched/topology"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// RejectError is a command the scheduler cannot accept, with its reason.
type RejectError struct {
	Reason deadletter.Reason
	Detail string
}

func (e *RejectError) Error() string { return fmt.Sprintf("%s: %s", e.Reason, e.Detail) }

func reject(r deadletter.Reason, format string, args ...any) *RejectError {
	return &RejectError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// PastDue says what to do with a due time further in the past than MaxPast.
type PastDue int

const (
	// PastDueReject rejects the command (to the dead-letter topic).
	PastDueReject PastDue = iota
	// PastDueFire fires the follow-up at once.
	PastDueFire
)

// Limits bound what a command may ask for. Due times are checked against
// the time the command was issued (requested_at, else the record
// timestamp), so a replay decides the same way; requested_at, which the
// producer sets, must lie within MaxSkew of the record timestamp, which the
// broker sets (the onboarding topic uses LogAppendTime), so the limits hold
// against the broker's clock whatever a producer writes.
type Limits struct {
	// MaxDelay bounds delays, and absolute due times after the command.
	MaxDelay time.Duration
	// MaxPast: a due time up to this long before the command fires at once;
	// one further in the past is handled as PastDue says.
	MaxPast time.Duration
	PastDue PastDue
	// MaxPayload bounds a follow-up's payload, in bytes.
	MaxPayload int
	// MaxSkew bounds how far requested_at may lie from the record
	// timestamp, either way; 0: no bound (tests only).
	MaxSkew time.Duration
	// MaxFollowUps bounds the follow-ups of one Onboard; MaxPending the
	// follow-ups pending for one user once an Onboard is applied. 0: no
	// bound (tests only).
	MaxFollowUps, MaxPending int
}

// MaxScriptBytes bounds the length of a command's script, in bytes (its
// ids are bounded by codec.MaxIDBytes).
const MaxScriptBytes = 4096

// DefaultLimits: delays up to 400 days, due times up to a day in the past
// fire at once, older ones are rejected, payloads up to 16 KiB, requested_at
// within a day of the record timestamp, up to 1000 follow-ups in a command
// and 1000 pending for a user.
func DefaultLimits() Limits {
	return Limits{MaxDelay: 400 * 24 * time.Hour, MaxPast: 24 * time.Hour, PastDue: PastDueReject, MaxPayload: 16 << 10, MaxSkew: 24 * time.Hour,
		MaxFollowUps: 1000, MaxPending: 1000}
}

// The times the scheduler accepts, in commands and record timestamps alike:
// well inside what a due time held as int64 Unix nanoseconds can represent
// (1678 to 2262), so no time wraps around.
var (
	MinTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// checkTime rejects a time outside [MinTime, MaxTime).
func checkTime(what string, t time.Time) error {
	if t.Before(MinTime) || !t.Before(MaxTime) {
		return reject(deadletter.ReasonTimeOutOfRange, "%s %s is outside %d to %d", what, t.UTC().Format(time.RFC3339), MinTime.Year(), MaxTime.Year())
	}
	return nil
}

// timestamp reads a protobuf timestamp, rejecting an invalid or
// out-of-range one.
func timestamp(what string, ts *timestamppb.Timestamp) (time.Time, error) {
	if err := ts.CheckValid(); err != nil {
		return time.Time{}, reject(deadletter.ReasonTimeOutOfRange, "%s: %v", what, err)
	}
	t := ts.AsTime()
	return t, checkTime(what, t)
}

// Issued is when a command was issued: requested_at, else the record
// timestamp. requested_at must lie within lim.MaxSkew of the record
// timestamp, and both within [MinTime, MaxTime).
//
// A record without a timestamp (zero: Kafka 4 has no record format without
// one, but Goka's tester emits such records) leaves requested_at unchecked.
func Issued(cmd *pb.Command, recordTime time.Time, lim Limits) (time.Time, error) {
	if cmd.GetRequestedAt() == nil {
		return recordTime, checkTime("record timestamp", recordTime)
	}
	req, err := timestamp("requested_at", cmd.GetRequestedAt())
	if err != nil || recordTime.IsZero() {
		return req, err
	}
	if err := checkTime("record timestamp", recordTime); err != nil {
		return time.Time{}, err
	}
	if skew := req.Sub(recordTime).Abs(); lim.MaxSkew > 0 && skew > lim.MaxSkew {
		return time.Time{}, reject(deadletter.ReasonRequestedAtSkew, "requested_at %s is %v from the record timestamp %s, limit %v",
			req.Format(time.RFC3339Nano), skew, recordTime.UTC().Format(time.RFC3339Nano), lim.MaxSkew)
	}
	return req, nil
}

// Validate checks a decoded command arriving under key in a record stamped
// recordTime. It returns the command's user id and when it was issued
// (Issued). The CLI runs the same checks before it produces.
func Validate(key string, cmd *pb.Command, recordTime time.Time, lim Limits) (user string, issued time.Time, err error) {
	c, err := validate(key, cmd, recordTime, lim)
	return c.user, c.issued, err
}

// checked is what validating a command learned, for applying it.
type checked struct {
	user   string
	issued time.Time
	// number is an Onboard's phone number with its region and zones (nil
	// when the Onboard sets no phone): the numbering plan is read once.
	number *phone.Number
}

func validate(key string, cmd *pb.Command, recordTime time.Time, lim Limits) (c checked, err error) {
	if err := checkLen("record key", key, codec.MaxIDBytes); err != nil {
		return checked{}, err
	}
	if err := checkLen("user id", cmd.GetUserId(), codec.MaxIDBytes); err != nil {
		return checked{}, err
	}
	c.user = cmd.GetUserId()
	switch {
	case c.user == "" && key == "":
		return c, reject(deadletter.ReasonMissingUserID, "no user id in key or value")
	case c.user == "":
		c.user = key
	case key != c.user:
		return checked{}, reject(deadletter.ReasonKeyMismatch, "record key %q differs from user id %q", key, c.user)
	}
	if strings.HasPrefix(c.user, topology.ReservedPrefix) {
		return checked{}, reject(deadletter.ReasonReservedUserID, "user id %q starts with %q, which is reserved", c.user, topology.ReservedPrefix)
	}
	if c.issued, err = Issued(cmd, recordTime, lim); err != nil {
		c.issued = time.Time{}
		return c, err
	}
	return c, validateCommand(cmd, &c, lim)
}

func validateCommand(cmd *pb.Command, c *checked, lim Limits) error {
	issued := c.issued
	switch cc := cmd.GetCommand().(type) {
	case *pb.Command_Onboard:
		return validateOnboard(cc.Onboard, c, lim)
	case *pb.Command_Cancel:
		return checkLen("task id", cc.Cancel.GetTaskId(), codec.MaxIDBytes)
	case *pb.Command_Forget:
		return nil
	case *pb.Command_CallEnded:
		return validateCallEnded(cc.CallEnded)
	case *pb.Command_RunNow:
		if cc.RunNow.GetTaskId() == "" {
			return reject(deadletter.ReasonMissingTaskID, "run-now needs a task id")
		}
		return checkLen("task id", cc.RunNow.GetTaskId(), codec.MaxIDBytes)
	case *pb.Command_Reschedule:
		r := cc.Reschedule
		if err := checkLen("task id", r.GetTaskId(), codec.MaxIDBytes); err != nil {
			return err
		}
		if r.GetTaskId() == "" {
			return reject(deadletter.ReasonMissingTaskID, "reschedule needs a task id")
		}
		if r.GetWhen() == nil {
			return reject(deadletter.ReasonMissingWhen, "task %q has neither delay nor due_at", r.GetTaskId())
		}
		return checkDue(r.GetTaskId(), r.GetDelay(), r.GetDueAt(), issued, issued, lim)
	default:
		return reject(deadletter.ReasonUnknownCommand, "no known command case (a newer producer?)")
	}
}

func validateOnboard(o *pb.Onboard, c *checked, lim Limits) error {
	issued := c.issued
	tz := o.GetTimeZone()
	if tz != "" {
		if _, err := phone.LoadZone(tz); err != nil {
			return reject(deadletter.ReasonUnknownTimeZone, "time zone: %v", err)
		}
	}
	if o.GetPhone() != "" {
		n, err := phone.Parse(o.GetPhone())
		if err != nil {
			return reject(deadletter.ReasonInvalidPhone, "%v", err)
		}
		if tz == "" && len(n.Zones) == 0 {
			return reject(deadletter.ReasonNoTimeZone, "phone %s (region %s) has no time zone in the numbering plan; give the user's time_zone (there is no default zone)", n.E164, n.Region)
		}
		c.number = &n
	}
	base := issued
	if o.GetOnboardedAt() != nil {
		var err error
		if base, err = timestamp("onboarded_at", o.GetOnboardedAt()); err != nil {
			return err
		}
	}
	if n := len(o.GetFollowUps()); lim.MaxFollowUps > 0 && n > lim.MaxFollowUps {
		return reject(deadletter.ReasonTooManyFollowUps, "%d follow-ups in one command, limit %d", n, lim.MaxFollowUps)
	}
	seen := make(map[string]bool)
	for i, f := range o.GetFollowUps() {
		id := taskID(f, i)
		if err := checkFollowUpLen(id, f); err != nil {
			return err
		}
		if seen[id] {
			return reject(deadletter.ReasonDuplicateTaskID, "task id %q appears twice in one command (across commands a task id is upserted)", id)
		}
		seen[id] = true
		if f.GetWhen() == nil {
			return reject(deadletter.ReasonMissingWhen, "task %q has neither delay nor due_at", id)
		}
		if err := checkDue(id, f.GetDelay(), f.GetDueAt(), base, issued, lim); err != nil {
			return err
		}
		if lim.MaxPayload > 0 && len(f.GetPayload()) > lim.MaxPayload {
			return reject(deadletter.ReasonPayloadTooLarge, "task %q payload is %d bytes, limit %d", id, len(f.GetPayload()), lim.MaxPayload)
		}
		if f.GetRepeat() != nil {
			if _, err := repeatOf(id, f.GetRepeat()); err != nil {
				return err
			}
		}
	}
	return nil
}

// repeatOf reads a follow-up's Repeat.
func repeatOf(task string, r *pb.Repeat) (*recur.Recurrence, error) {
	var until time.Time
	if r.GetUntil() != nil {
		var err error
		if until, err = timestamp(fmt.Sprintf("task %q repeat.until", task), r.GetUntil()); err != nil {
			return nil, err
		}
	}
	if r.GetCount() > recur.MaxCount {
		return nil, reject(deadletter.ReasonInvalidRepeat, "task %q: repeat.count %d is out of range; accepted: 0 (no limit) to %d", task, r.GetCount(), recur.MaxCount)
	}
	rec, err := recur.New(r.GetEvery(), r.GetCron(), int(r.GetCount()), until)
	if err != nil {
		if errors.Is(err, recur.ErrInvalid) {
			return nil, reject(deadletter.ReasonInvalidRepeat, "task %q: %v", task, err)
		}
		return nil, err
	}
	return &rec, nil
}

// dueTime is a follow-up's due time: at, else delay after base.
func dueTime(delay *durationpb.Duration, at *timestamppb.Timestamp, base time.Time) time.Time {
	if at != nil {
		return at.AsTime()
	}
	return base.Add(delay.AsDuration())
}

// checkDue checks a delay (counted from base) or an absolute due time
// against the limits, relative to when the command was issued.
func checkDue(task string, delay *durationpb.Duration, at *timestamppb.Timestamp, base, issued time.Time, lim Limits) error {
	var due time.Time
	if delay != nil {
		d := delay.AsDuration()
		switch {
		case d < 0:
			return reject(deadletter.ReasonNegativeDelay, "task %q has delay %v", task, d)
		case lim.MaxDelay > 0 && d > lim.MaxDelay:
			return reject(deadletter.ReasonDelayTooLong, "task %q has delay %v, limit %v", task, d, lim.MaxDelay)
		}
		due = base.Add(d)
	} else {
		var err error
		if due, err = timestamp(fmt.Sprintf("task %q due_at", task), at); err != nil {
			return err
		}
	}
	if err := checkTime(fmt.Sprintf("task %q due time", task), due); err != nil {
		return err
	}
	switch {
	case lim.MaxDelay > 0 && due.Sub(issued) > lim.MaxDelay:
		return reject(deadletter.ReasonDueTooFarFuture, "task %q is due %s, more than %v after the command", task, due.Format(time.RFC3339), lim.MaxDelay)
	case lim.PastDue == PastDueReject && lim.MaxPast > 0 && issued.Sub(due) > lim.MaxPast:
		return reject(deadletter.ReasonDueTooFarPast, "task %q was due %s, more than %v before the command", task, due.Format(time.RFC3339), lim.MaxPast)
	}
	return nil
}

// checkLen rejects a string longer than limit bytes.
func checkLen(what, v string, limit int) error {
	if len(v) > limit {
		return reject(deadletter.ReasonTooLong, "%s of %d bytes (%.32q...), limit %d", what, len(v), v, limit)
	}
	return nil
}

// checkFollowUpLen checks the lengths of a follow-up's task id, script and
// campaign id.
func checkFollowUpLen(id string, f *pb.FollowUp) error {
	if err := checkLen("task id", id, codec.MaxIDBytes); err != nil {
		return err
	}
	if err := checkLen(fmt.Sprintf("task %q ivr_script", id), f.GetAction().GetIvrScript(), MaxScriptBytes); err != nil {
		return err
	}
	return checkLen(fmt.Sprintf("task %q campaign_id", id), f.GetAction().GetCampaignId(), codec.MaxIDBytes)
}

func taskID(f *pb.FollowUp, i int) string {
	if f.GetTaskId() != "" {
		return f.GetTaskId()
	}
	return fmt.Sprintf("followup-%d", i+1)
}

// validateCallEnded checks a call's outcome report; its time is the
// command's issue time, checked with every command's.
func validateCallEnded(e *pb.CallEnded) error {
	if err := checkLen("task id", e.GetTaskId(), codec.MaxIDBytes); err != nil {
		return err
	}
	if err := checkLen("call id", e.GetCallId(), codec.MaxIDBytes); err != nil {
		return err
	}
	switch {
	case e.GetTaskId() == "":
		return reject(deadletter.ReasonMissingTaskID, "call_ended needs a task id")
	case e.GetCallId() == "":
		return reject(deadletter.ReasonMissingCallID, "call_ended of task %q needs a call id", e.GetTaskId())
	case e.GetAttempt() < 1:
		return reject(deadletter.ReasonInvalidCallEnded, "call %s: attempt %d; attempts count from 1", e.GetCallId(), e.GetAttempt())
	}
	switch e.GetOutcome() {
	case pb.Outcome_OUTCOME_ANSWERED, pb.Outcome_OUTCOME_NO_ANSWER, pb.Outcome_OUTCOME_BUSY, pb.Outcome_OUTCOME_FAILED,
		pb.Outcome_OUTCOME_CANCELED, pb.Outcome_OUTCOME_MACHINE, pb.Outcome_OUTCOME_PLACED, pb.Outcome_OUTCOME_SUPPRESSED,
		pb.Outcome_OUTCOME_OPTED_OUT:
		return nil
	}
	return reject(deadletter.ReasonInvalidCallEnded, "call %s: outcome %v is not a final outcome", e.GetCallId(), e.GetOutcome())
}
