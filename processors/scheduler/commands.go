package scheduler

import (
	"fmt"
	"regexp"
	"sync"
	"time"
	_ "time/tzdata" // time zones validate the same on every host

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// Reason says why a command was rejected.
type Reason string

// The reasons a command is rejected.
const (
	ReasonUndecodable     Reason = "undecodable"
	ReasonUnknownCommand  Reason = "unknown_command"
	ReasonMissingUserID   Reason = "missing_user_id"
	ReasonKeyMismatch     Reason = "key_mismatch"
	ReasonMissingPhone    Reason = "missing_phone"
	ReasonInvalidPhone    Reason = "invalid_phone"
	ReasonUnknownTimeZone Reason = "unknown_time_zone"
	ReasonNegativeDelay   Reason = "negative_delay"
	ReasonMissingTaskID   Reason = "missing_task_id"
	ReasonDuplicateTaskID Reason = "duplicate_task_id"
	ReasonMissingWhen     Reason = "missing_when"
)

// RejectError is a command the scheduler cannot accept, with its reason.
type RejectError struct {
	Reason Reason
	Detail string
}

func (e *RejectError) Error() string { return fmt.Sprintf("%s: %s", e.Reason, e.Detail) }

func reject(r Reason, format string, args ...any) *RejectError {
	return &RejectError{Reason: r, Detail: fmt.Sprintf(format, args...)}
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

// Validate checks a decoded command arriving under key. It returns the
// command's user id.
func Validate(key string, cmd *pb.Command) (string, error) {
	user := cmd.GetUserId()
	switch {
	case user == "" && key == "":
		return "", reject(ReasonMissingUserID, "no user id in key or value")
	case user == "":
		user = key
	case key != user:
		return "", reject(ReasonKeyMismatch, "record key %q differs from user id %q", key, user)
	}
	switch c := cmd.GetCommand().(type) {
	case *pb.Command_Onboard:
		return user, validateOnboard(c.Onboard)
	case *pb.Command_Cancel:
		return user, nil
	case *pb.Command_Reschedule:
		r := c.Reschedule
		if r.GetTaskId() == "" {
			return user, reject(ReasonMissingTaskID, "reschedule needs a task id")
		}
		return user, checkWhen(r.GetTaskId(), r.GetWhen() != nil, r.GetDelay().AsDuration())
	default:
		return user, reject(ReasonUnknownCommand, "command case %T", c)
	}
}

func validateOnboard(o *pb.Onboard) error {
	if o.GetPhone() != "" && !e164.MatchString(o.GetPhone()) {
		return reject(ReasonInvalidPhone, "phone %q is not E.164 (like +14155550123)", o.GetPhone())
	}
	if tz := o.GetTimeZone(); tz != "" {
		if err := checkZone(tz); err != nil {
			return reject(ReasonUnknownTimeZone, "time zone %q: %v", tz, err)
		}
	}
	seen := make(map[string]bool)
	for i, f := range o.GetFollowUps() {
		id := taskID(f, i)
		if seen[id] {
			return reject(ReasonDuplicateTaskID, "task id %q appears twice", id)
		}
		seen[id] = true
		if f.GetDelay() != nil {
			if err := checkWhen(id, true, f.GetDelay().AsDuration()); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkWhen(task string, set bool, delay time.Duration) error {
	if !set {
		return reject(ReasonMissingWhen, "task %q has neither delay nor due_at", task)
	}
	if delay < 0 {
		return reject(ReasonNegativeDelay, "task %q has delay %v", task, delay)
	}
	return nil
}

func taskID(f *pb.FollowUp, i int) string {
	if f.GetTaskId() != "" {
		return f.GetTaskId()
	}
	return fmt.Sprintf("followup-%d", i+1)
}

// onCommand applies a schedule, cancel or reschedule command.
func (s *Scheduler) onCommand(ctx goka.Context, msg any) {
	s.Stats.Commands.Add(1)
	cmd, ok := msg.(*pb.Command)
	if !ok {
		err := reject(ReasonUndecodable, "%v", msg)
		if u, isU := msg.(*codec.Undecodable); isU {
			err = reject(ReasonUndecodable, "%v", u.Err)
		}
		s.rejected(ctx, err)
		return
	}
	if _, err := Validate(ctx.Key(), cmd); err != nil {
		s.rejected(ctx, err)
		return
	}
	// Relative delays count from the time the command was issued, which a
	// replay reproduces: requested_at, else the record's timestamp.
	base := ctx.Timestamp()
	if cmd.GetRequestedAt() != nil {
		base = cmd.GetRequestedAt().AsTime()
	}
	st := s.state(ctx)
	changed := false
	switch c := cmd.GetCommand().(type) {
	case *pb.Command_Onboard:
		if err := s.onboard(st, c.Onboard, base); err != nil {
			s.rejected(ctx, err)
			return
		}
		changed = true
	case *pb.Command_Cancel:
		changed = s.cancel(ctx, st, c.Cancel.GetTaskId())
	case *pb.Command_Reschedule:
		changed = s.reschedule(ctx, st, c.Reschedule, base)
	}
	if changed {
		ctx.SetValue(st)
	}
}

func (s *Scheduler) rejected(ctx goka.Context, err error) {
	s.Stats.Invalid.Add(1)
	s.cfg.Logger.Warn("command rejected", "topic", ctx.Topic(), "partition", ctx.Partition(), "offset", ctx.Offset(), "key", ctx.Key(), "err", err)
}

func (s *Scheduler) onboard(st *pb.UserState, o *pb.Onboard, base time.Time) error {
	if o.GetPhone() != "" {
		st.Phone = o.GetPhone()
	}
	if st.GetPhone() == "" {
		return reject(ReasonMissingPhone, "user %q has no phone number", st.GetUserId())
	}
	if o.GetTimeZone() != "" {
		st.TimeZone = o.GetTimeZone()
	}
	if o.GetOnboardedAt() != nil {
		st.OnboardedAt = o.GetOnboardedAt()
		base = o.GetOnboardedAt().AsTime()
	}
	follow := o.GetFollowUps()
	if len(follow) == 0 {
		d := s.cfg.Default
		follow = []*pb.FollowUp{{TaskId: d.TaskID, When: &pb.FollowUp_Delay{Delay: durationpb.New(d.Delay)}, Action: d.Action}}
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
func (s *Scheduler) reschedule(ctx goka.Context, st *pb.UserState, r *pb.Reschedule, base time.Time) bool {
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
			s.event(ctx, pb.ScheduleEvent_KIND_TOO_LATE, task, f.GetTask().GetDueAt(), f.GetCallId(),
				fmt.Sprintf("fired at %s", f.GetFiredAt().AsTime().Format(time.RFC3339Nano)))
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
