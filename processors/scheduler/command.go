package scheduler

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // time zones validate the same on every host

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/deadletter"
	"github.com/ivrsched/ivrsched/topology"
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
// timestamp), so a replay decides the same way.
type Limits struct {
	// MaxDelay bounds delays, and absolute due times after the command.
	MaxDelay time.Duration
	// MaxPast: a due time up to this long before the command fires at once;
	// one further in the past is handled as PastDue says.
	MaxPast time.Duration
	PastDue PastDue
	// MaxPayload bounds a follow-up's payload, in bytes.
	MaxPayload int
}

// DefaultLimits: delays up to 400 days, due times up to a day in the past
// fire at once, older ones are rejected, payloads up to 16 KiB.
func DefaultLimits() Limits {
	return Limits{MaxDelay: 400 * 24 * time.Hour, MaxPast: 24 * time.Hour, PastDue: PastDueReject, MaxPayload: 16 << 10}
}

var e164 = regexp.MustCompile(`^\+[1-9][0-9]{1,14}$`)

var zones sync.Map // name → error (nil when valid)

func checkZone(name string) error {
	if v, ok := zones.Load(name); ok {
		err, _ := v.(error)
		return err
	}
	_, err := time.LoadLocation(name)
	zones.Store(name, err)
	return err
}

// IssuedAt is when a command was issued: requested_at, else the record time.
func IssuedAt(cmd *pb.Command, recordTime time.Time) time.Time {
	if cmd.GetRequestedAt() != nil {
		return cmd.GetRequestedAt().AsTime()
	}
	return recordTime
}

// Validate checks a decoded command arriving under key, issued at issued. It
// returns the command's user id. The CLI runs the same checks before it
// produces.
func Validate(key string, cmd *pb.Command, issued time.Time, lim Limits) (string, error) {
	user := cmd.GetUserId()
	switch {
	case user == "" && key == "":
		return "", reject(deadletter.ReasonMissingUserID, "no user id in key or value")
	case user == "":
		user = key
	case key != user:
		return "", reject(deadletter.ReasonKeyMismatch, "record key %q differs from user id %q", key, user)
	}
	if strings.HasPrefix(user, topology.ReservedPrefix) {
		return "", reject(deadletter.ReasonReservedUserID, "user id %q starts with %q, which is reserved", user, topology.ReservedPrefix)
	}
	switch c := cmd.GetCommand().(type) {
	case *pb.Command_Onboard:
		return user, validateOnboard(c.Onboard, issued, lim)
	case *pb.Command_Cancel:
		return user, nil
	case *pb.Command_Reschedule:
		r := c.Reschedule
		if r.GetTaskId() == "" {
			return user, reject(deadletter.ReasonMissingTaskID, "reschedule needs a task id")
		}
		if r.GetWhen() == nil {
			return user, reject(deadletter.ReasonMissingWhen, "task %q has neither delay nor due_at", r.GetTaskId())
		}
		return user, checkDue(r.GetTaskId(), r.GetDelay(), r.GetDueAt(), issued, issued, lim)
	default:
		return user, reject(deadletter.ReasonUnknownCommand, "no known command case (a newer producer?)")
	}
}

func validateOnboard(o *pb.Onboard, issued time.Time, lim Limits) error {
	if o.GetPhone() != "" && !e164.MatchString(o.GetPhone()) {
		return reject(deadletter.ReasonInvalidPhone, "phone %q is not E.164 (like +14155550123)", o.GetPhone())
	}
	if tz := o.GetTimeZone(); tz != "" {
		if err := checkZone(tz); err != nil {
			return reject(deadletter.ReasonUnknownTimeZone, "time zone %q: %v", tz, err)
		}
	}
	base := issued
	if o.GetOnboardedAt() != nil {
		base = o.GetOnboardedAt().AsTime()
	}
	seen := make(map[string]bool)
	for i, f := range o.GetFollowUps() {
		id := taskID(f, i)
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
	}
	return nil
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
		due = at.AsTime()
	}
	switch {
	case lim.MaxDelay > 0 && due.Sub(issued) > lim.MaxDelay:
		return reject(deadletter.ReasonDueTooFarFuture, "task %q is due %s, more than %v after the command", task, due.Format(time.RFC3339), lim.MaxDelay)
	case lim.PastDue == PastDueReject && lim.MaxPast > 0 && issued.Sub(due) > lim.MaxPast:
		return reject(deadletter.ReasonDueTooFarPast, "task %q was due %s, more than %v before the command", task, due.Format(time.RFC3339), lim.MaxPast)
	}
	return nil
}

func taskID(f *pb.FollowUp, i int) string {
	if f.GetTaskId() != "" {
		return f.GetTaskId()
	}
	return fmt.Sprintf("followup-%d", i+1)
}

// HeaderForwarded marks a command the scheduler forwarded to its user's
// partition; its value is the original topic/partition/offset.
const HeaderForwarded = "ivrsched-forwarded-from"

// onCommand applies a schedule, cancel or reschedule command. Invalid
// commands go to the dead-letter topic; a valid command that arrived on
// another partition than its user's is forwarded there.
func (s *Scheduler) onCommand(ctx goka.Context, msg any) {
	s.Stats.Commands.Add(1)
	cmd, ok := msg.(*pb.Command)
	if !ok {
		s.rejectRecord(ctx, msg, reject(deadletter.ReasonUndecodable, "%v", undecodable(msg)))
		return
	}
	issued := IssuedAt(cmd, ctx.Timestamp())
	if _, err := Validate(ctx.Key(), cmd, issued, s.cfg.Limits); err != nil {
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
	st, first, err := s.state(ctx)
	if err != nil {
		// The stored bytes stay as they are; a Forget still erases them.
		s.rejectRecord(ctx, cmd, err)
		return
	}
	// What ticks fired is recorded first, so that a late cancel or
	// reschedule of it is reported as too late.
	changed := s.settle(ctx, st, false)
	switch c := cmd.GetCommand().(type) {
	case *pb.Command_Onboard:
		if err := s.onboard(st, c.Onboard, issued, first); err != nil {
			s.rejectRecord(ctx, cmd, err)
			return
		}
		changed = true
	case *pb.Command_Cancel:
		changed = s.cancel(ctx, st, c.Cancel.GetTaskId()) || changed
	case *pb.Command_Reschedule:
		changed = s.reschedule(ctx, st, c.Reschedule, issued) || changed
	}
	// A follow-up now scheduled at or before the fired mark would never be
	// fired by a tick: it fires here.
	s.settle(ctx, st, true)
	if changed {
		ctx.SetValue(st)
	}
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
	s.dlq.Send(ctx, reason, detail, rawValue(msg))
}

// rawValue is the value to keep in a dead letter: the undecodable bytes, or
// the message encoded again.
func rawValue(msg any) []byte {
	switch m := msg.(type) {
	case *codec.Undecodable:
		return m.Data
	case proto.Message:
		b, _ := proto.Marshal(m)
		return b
	}
	return nil
}

// onboard applies an Onboard to the user's value. first is a user with no
// value yet: only then does an Onboard without follow-ups get the default
// follow-up (a later one updates the phone or time zone and calls no one).
func (s *Scheduler) onboard(st *pb.UserState, o *pb.Onboard, issued time.Time, first bool) error {
	base := issued
	if o.GetPhone() != "" {
		st.Phone = o.GetPhone()
	}
	if st.GetPhone() == "" {
		return reject(deadletter.ReasonMissingPhone, "user %q has no phone number", st.GetUserId())
	}
	if o.GetTimeZone() != "" {
		st.TimeZone = o.GetTimeZone()
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
	for i, f := range follow {
		due := base.Add(f.GetDelay().AsDuration())
		if f.GetDueAt() != nil {
			due = f.GetDueAt().AsTime()
		}
		t := &pb.Task{TaskId: taskID(f, i), DueAt: timestamppb.New(due), Action: f.GetAction(), Payload: f.GetPayload(), Attempt: 1}
		st.Pending = upsert(st.Pending, t)
		s.Stats.Scheduled.Add(1)
	}
	sortPending(st.Pending)
	return nil
}

func upsert(p []*pb.Task, t *pb.Task) []*pb.Task {
	for i, old := range p {
		if old.GetTaskId() == t.GetTaskId() {
			p[i] = t
			return p
		}
	}
	return append(p, t)
}

// cancel reports whether the state changed.
func (s *Scheduler) cancel(ctx goka.Context, st *pb.UserState, task string) bool {
	if task == "" {
		for _, t := range st.Pending {
			s.event(ctx, pb.ScheduleEvent_KIND_CANCELLED, t.GetTaskId(), t.GetDueAt(), "", "")
			s.Stats.Cancelled.Add(1)
		}
		if len(st.Pending) == 0 {
			s.event(ctx, pb.ScheduleEvent_KIND_UNKNOWN_TASK, "", nil, "", "no pending follow-ups to cancel")
			return false
		}
		st.Pending = nil
		return true
	}
	for i, t := range st.Pending {
		if t.GetTaskId() == task {
			st.Pending = append(st.Pending[:i], st.Pending[i+1:]...)
			s.event(ctx, pb.ScheduleEvent_KIND_CANCELLED, task, t.GetDueAt(), "", "")
			s.Stats.Cancelled.Add(1)
			return true
		}
	}
	s.notPending(ctx, st, task)
	return false
}

// reschedule reports whether the state changed.
func (s *Scheduler) reschedule(ctx goka.Context, st *pb.UserState, r *pb.Reschedule, issued time.Time) bool {
	base := issued
	due := base.Add(r.GetDelay().AsDuration())
	if r.GetDueAt() != nil {
		due = r.GetDueAt().AsTime()
	}
	for _, t := range st.Pending {
		if t.GetTaskId() == r.GetTaskId() {
			t.DueAt = timestamppb.New(due)
			sortPending(st.Pending)
			s.event(ctx, pb.ScheduleEvent_KIND_RESCHEDULED, t.GetTaskId(), t.GetDueAt(), "", "")
			s.Stats.Rescheduled.Add(1)
			return true
		}
	}
	s.notPending(ctx, st, r.GetTaskId())
	return false
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
