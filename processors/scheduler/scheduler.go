// Package scheduler is the processor that keeps each user's pending follow-ups
// in its Goka group table and fires them, never early, to the ivr-calls topic.
//
// Its inputs are the commands on the onboarding topic (schedule, cancel,
// reschedule), the punctuation ticks, and its own loop topic of fire
// messages. Every write of a user's state happens in the callback for that
// user's key. See docs/design.md.
package scheduler

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/processors/deadletter"
	"github.com/ivrsched/ivrsched/processors/punctuation"
	"github.com/ivrsched/ivrsched/topology"
)

// DefaultFollowUp is what an Onboard without follow-ups schedules.
type DefaultFollowUp struct {
	TaskID string
	Delay  time.Duration
	Action *pb.Action
}

// Config configures the scheduler.
type Config struct {
	Topics topology.Topics
	// Storage builds the local store of each table partition (LevelDB in
	// production, the tester's memory store in tests). Required.
	Storage storage.Builder
	Clock   clock.Clock
	Default DefaultFollowUp
	// Limits bound what commands may ask for; zero value: DefaultLimits.
	Limits Limits
	// Partitions of the co-partitioned topics. A command whose key belongs
	// on another partition than the one it arrived on is forwarded there.
	// 0 or 1 turns the check off.
	Partitions int32
	// Visibility is how long a user handed to a fire message is not offered
	// again while that message is in flight.
	Visibility time.Duration
	// MaxFiresPerTick bounds the fire messages one tick sends.
	MaxFiresPerTick int
	// FiredHistory is how many fired follow-ups each user's state remembers.
	FiredHistory int
	// Punctuation tunes the ticks; Table, Earliest, Clock and Logger are set
	// by the scheduler.
	Punctuation punctuation.Config
	Logger      *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Default.TaskID == "" {
		c.Default.TaskID = "followup-1"
	}
	if c.Default.Delay == 0 {
		c.Default.Delay = 24 * time.Hour
	}
	if c.Default.Action == nil {
		c.Default.Action = &pb.Action{IvrScript: "welcome"}
	}
	if c.Visibility <= 0 {
		c.Visibility = 5 * time.Second
	}
	if c.MaxFiresPerTick <= 0 {
		c.MaxFiresPerTick = 5000
	}
	if c.FiredHistory <= 0 {
		c.FiredHistory = 16
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Limits == (Limits{}) {
		c.Limits = DefaultLimits()
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Topics.Scheduler == "":
		return errors.New("scheduler: no topic names")
	case c.Storage == nil:
		return errors.New("scheduler: no storage builder")
	case c.Default.Delay < 0:
		return fmt.Errorf("scheduler: default delay %v is negative", c.Default.Delay)
	}
	return nil
}

// Stats counts what the scheduler did since it started.
type Stats struct {
	Commands, Scheduled, Cancelled, Rescheduled, Fired, Republished, Invalid, Forwarded atomic.Int64
}

// Scheduler holds the callbacks and the punctuator of the scheduler processor.
type Scheduler struct {
	cfg   Config
	punct *punctuation.Punctuator
	dlq   *deadletter.Writer
	Stats Stats
}

// New returns a scheduler. send produces a tick to a partition of the ticks
// topic (see TickSender); it may be nil when ticks are fed by hand (tests).
func New(cfg Config, send func(partition int32) error) (*Scheduler, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc := cfg.Punctuation
	pc.Table = string(cfg.Topics.SchedulerTable())
	pc.Earliest = EarliestDue
	pc.Send = send
	pc.Clock = cfg.Clock
	pc.Logger = cfg.Logger
	p, err := punctuation.New(pc)
	if err != nil {
		return nil, err
	}
	dlq := &deadletter.Writer{Topic: cfg.Topics.SchedulerDLQ, Group: cfg.Topics.Scheduler, Clock: cfg.Clock, Logger: cfg.Logger}
	return &Scheduler{cfg: cfg, punct: p, dlq: dlq}, nil
}

// Punctuator returns the scheduler's punctuator, to Run beside the processor.
func (s *Scheduler) Punctuator() *punctuation.Punctuator { return s.punct }

// DeadLetters counts the records sent to the dead-letter topic, per reason.
func (s *Scheduler) DeadLetters() map[string]int64 { return s.dlq.Counts() }

// Graph is the scheduler's group graph.
func (s *Scheduler) Graph() *goka.GroupGraph {
	t := s.cfg.Topics
	return goka.DefineGroup(t.Scheduler,
		goka.Input(t.Onboarding, new(codec.Command), s.onCommand),
		goka.Input(t.Ticks, new(codec.Tick), s.onTick),
		goka.Loop(new(codec.Fire), s.onFire),
		goka.Output(t.Calls, new(codec.IVRCall)),
		goka.Output(t.Events, new(codec.ScheduleEvent)),
		goka.Output(t.Onboarding, new(codec.Command)), // forwarding misrouted commands
		s.dlq.Edge(),
		goka.Persist(new(codec.UserState)),
	)
}

// Processor builds the Goka processor. opts come first (cluster wiring, or
// goka.WithTester); the scheduler's indexed storage is added last.
func (s *Scheduler) Processor(brokers []string, opts ...goka.ProcessorOption) (*goka.Processor, error) {
	opts = append(opts, goka.WithStorageBuilder(s.punct.StorageBuilder(s.cfg.Storage)))
	p, err := goka.NewProcessor(brokers, s.Graph(), opts...)
	if err != nil {
		return nil, fmt.Errorf("scheduler processor: %w", err)
	}
	return p, nil
}

// TickSender returns a send function for New that emits ticks with em, one
// key per partition of the ticks topic, stamped with clk (nil: the wall clock).
func TickSender(em *goka.Emitter, partitions int32, clk clock.Clock, log *slog.Logger) func(int32) error {
	keys := topology.TickKeys(partitions)
	if clk == nil {
		clk = clock.Real{}
	}
	return func(p int32) error {
		if p < 0 || int(p) >= len(keys) {
			return fmt.Errorf("tick for partition %d of %d", p, len(keys))
		}
		prom, err := em.Emit(keys[p], &pb.Tick{Partition: p, SentAt: timestamppb.New(clk.Now())})
		if err != nil {
			return err
		}
		prom.Then(func(err error) {
			if err != nil {
				log.Warn("tick not delivered", "partition", p, "err", err)
			}
		})
		return nil
	}
}

// EarliestDue reads the earliest pending due time from an encoded UserState.
// It runs on every table write (the due index's storage wrapper), so it
// reads only the pending tasks' due times off the wire instead of decoding
// the whole value.
func EarliestDue(value []byte) (time.Time, bool, error) {
	var (
		min   time.Time
		found bool
	)
	err := eachField(value, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != userStatePending || typ != protowire.BytesType {
			return nil
		}
		due, err := taskDue(v)
		if err != nil {
			return err
		}
		if !found || due.Before(min) {
			min, found = due, true
		}
		return nil
	})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("decode user state: %w", err)
	}
	return min, found, nil
}

// Field numbers read by EarliestDue (see ivrsched.proto).
const (
	userStatePending = 5 // UserState.pending
	taskDueAt        = 2 // Task.due_at
	timestampSeconds = 1
	timestampNanos   = 2
)

// taskDue reads Task.due_at as proto.Unmarshal would: repeated occurrences
// merge, a missing due time is the zero Timestamp.
func taskDue(task []byte) (time.Time, error) {
	var sec, nsec int64
	err := eachField(task, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != taskDueAt || typ != protowire.BytesType {
			return nil
		}
		return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			if typ != protowire.VarintType {
				return nil
			}
			x, _ := protowire.ConsumeVarint(v)
			switch num {
			case timestampSeconds:
				sec = int64(x)
			case timestampNanos:
				nsec = int64(int32(x))
			}
			return nil
		})
	})
	return time.Unix(sec, nsec).UTC(), err
}

// eachField calls fn with every field of a protobuf message: its number,
// wire type and value bytes (for a varint, the varint itself).
func eachField(b []byte, fn func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			m, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			v, n = m, k
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			v = b[:n]
		}
		if err := fn(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// state returns the user's table value, or a new one.
func (s *Scheduler) state(ctx goka.Context) *pb.UserState {
	switch v := ctx.Value().(type) {
	case *pb.UserState:
		return v
	case *codec.Undecodable:
		s.cfg.Logger.Error("unreadable user state, starting afresh", "user", ctx.Key(), "err", v.Err)
	}
	return &pb.UserState{UserId: ctx.Key()}
}

// onTick hands the partition's due users to fire messages, one per user.
func (s *Scheduler) onTick(ctx goka.Context, msg any) {
	if _, ok := msg.(*pb.Tick); !ok {
		s.rejectRecord(ctx, msg, reject(ReasonUndecodable, "tick: %v", undecodable(msg)))
	}
	part := ctx.Partition()
	defer s.punct.Ticked(part)
	idx := s.punct.Index(part)
	if idx == nil {
		return
	}
	for _, d := range idx.TakeDue(s.cfg.Clock.Now(), s.cfg.Visibility, s.cfg.MaxFiresPerTick) {
		ctx.Loopback(d.User, &pb.Fire{DueAt: timestamppb.New(d.At)})
	}
}

// onFire fires the user's follow-ups that are due now. If this fire message
// is a replay (the process died before its offset was committed), the calls
// it fired before are published again, with the same call ids.
func (s *Scheduler) onFire(ctx goka.Context, msg any) {
	if _, ok := msg.(*pb.Fire); !ok {
		s.rejectRecord(ctx, msg, reject(ReasonUndecodable, "fire: %v", undecodable(msg)))
		return
	}
	st := s.state(ctx)
	for _, f := range st.GetFired() {
		if f.GetFireOffset() == ctx.Offset() {
			ctx.Emit(s.cfg.Topics.Calls, ctx.Key(), s.call(st, f))
			s.Stats.Republished.Add(1)
		}
	}
	now := s.cfg.Clock.Now()
	keep := st.Pending[:0]
	var fired bool
	for _, t := range st.Pending {
		if t.GetDueAt().AsTime().After(now) {
			keep = append(keep, t)
			continue
		}
		f := &pb.FiredTask{Task: t, CallId: CallID(st.UserId, t), FiredAt: timestamppb.New(now), FireOffset: ctx.Offset()}
		ctx.Emit(s.cfg.Topics.Calls, ctx.Key(), s.call(st, f))
		st.Fired = append(st.Fired, f)
		fired = true
		s.Stats.Fired.Add(1)
	}
	if !fired {
		return
	}
	st.Pending = keep
	if n := len(st.Fired) - s.cfg.FiredHistory; n > 0 {
		st.Fired = append(st.Fired[:0:0], st.Fired[n:]...)
	}
	ctx.SetValue(st)
}

func (s *Scheduler) call(st *pb.UserState, f *pb.FiredTask) *pb.IVRCall {
	t := f.GetTask()
	return &pb.IVRCall{
		CallId:      f.GetCallId(),
		UserId:      st.GetUserId(),
		TaskId:      t.GetTaskId(),
		Phone:       st.GetPhone(),
		TimeZone:    st.GetTimeZone(),
		DueAt:       t.GetDueAt(),
		FiredAt:     f.GetFiredAt(),
		Attempt:     t.GetAttempt(),
		Action:      t.GetAction(),
		Payload:     t.GetPayload(),
		OnboardedAt: st.GetOnboardedAt(),
	}
}

// CallID is deterministic from user, task, due time and attempt, so a replay
// publishes the same id and the dialer drops the duplicate; a task id re-used
// for a new due time gets a new id.
func CallID(user string, t *pb.Task) string {
	h := sha256.New()
	h.Write([]byte(user))
	h.Write([]byte{0})
	h.Write([]byte(t.GetTaskId()))
	h.Write([]byte{0})
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.GetDueAt().AsTime().UnixNano()))
	binary.BigEndian.PutUint32(b[8:], t.GetAttempt())
	h.Write(b[:])
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// sortPending orders pending follow-ups by due time, then task id.
func sortPending(p []*pb.Task) {
	sort.SliceStable(p, func(i, j int) bool {
		a, b := p[i].GetDueAt().AsTime(), p[j].GetDueAt().AsTime()
		if !a.Equal(b) {
			return a.Before(b)
		}
		return p[i].GetTaskId() < p[j].GetTaskId()
	})
}
