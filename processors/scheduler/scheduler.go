// Package scheduler is the processor that keeps each user's pending follow-ups
// in its Goka group table and fires them, never early, to the ivr-calls topic.
//
// Its inputs are the commands on the onboarding topic (schedule, cancel,
// reschedule) and the due-index ticks. A tick publishes the calls of its
// partition's due follow-ups and writes one value, the partition's fired
// mark; a user's value is written only in the callback for that user's key.
// See docs/design.md.
package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/policy"
	"github.com/ivrsched/ivrsched/internal/suppress"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
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
	// MaxValueBytes bounds a user's encoded value: a command or wake that
	// would make it larger is dead-lettered (state_too_large) and the value
	// stays as it was. 0: what the table's producer accepts by Sarama's
	// default Producer.MaxMessageBytes (kafkaclient.ValueBound). It bounds each dead
	// letter's record too (deadletter.Writer.MaxBytes).
	MaxValueBytes int
	// Partitions of the co-partitioned topics. A command whose key belongs
	// on another partition than the one it arrived on is forwarded there.
	// 0 or 1 turns the check off.
	Partitions int32
	// MaxFiresPerTick bounds the calls one tick publishes.
	MaxFiresPerTick int
	// ReplayKeep is how often the fired mark stages a checkpoint. A tick
	// replayed after a crash re-publishes the calls fired since it was sent;
	// those fired since the checkpoint (one to two ReplayKeep ago) are found
	// in memory, older ones by scanning the partition.
	ReplayKeep time.Duration
	// FiredHistory is how many fired follow-ups each user's state remembers.
	FiredHistory int
	// Retain: a user with nothing pending whose last due time and last
	// command are older than Retain is removed from the table (a
	// tombstone) and reported as KIND_EXPIRED. 0 keeps every user.
	Retain time.Duration
	// TickGap is the shortest time between two ticks of one partition
	// (0: the punctuator's default, 2 ms). Longer means fewer tick records
	// and up to that much more lateness.
	TickGap time.Duration
	// Policy returns the calling policy in force (see docs/design.md, "The
	// calling policy"). It is called concurrently from every partition
	// goroutine, for every command and tick, so it must be cheap (the
	// application's returns what its view of the ivr-policies topic last
	// decoded). A func that returns nil applies no policy: every follow-up
	// fires at its requested time. nil: policy.Default() (08:00 to 21:00
	// in the user's local time, every day).
	Policy func() *policy.Policy
	// Lateness, if set, observes each fired follow-up's lateness in
	// seconds: from its due time to the callback that publishes its call
	// (the call's fired_at). Called concurrently from every partition
	// goroutine, once per fire, so it must be cheap (a Prometheus
	// histogram is). A TimedObserver is also given the fire's clock
	// reading.
	Lateness Observer
	// Suppressions is the do-not-call list (nil: none). A follow-up whose
	// number it lists is not called when it falls due: it is reported
	// KIND_SUPPRESSED and counts as done. Called from every partition
	// goroutine; an error fails the partition, so the input replays.
	Suppressions suppress.Checker
	Logger       *slog.Logger
}

// Observer takes one observation (prometheus.Observer is one). It is
// called concurrently.
type Observer interface{ Observe(float64) }

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
	if c.ReplayKeep <= 0 {
		c.ReplayKeep = 5 * time.Second
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
	if c.MaxValueBytes == 0 {
		c.MaxValueBytes = kafkaclient.ValueBound(sarama.NewConfig())
	}
	if c.Limits == (Limits{}) {
		c.Limits = DefaultLimits()
	}
	if c.Policy == nil {
		def := policy.Default()
		c.Policy = func() *policy.Policy { return def }
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
	case c.Retain < 0:
		return fmt.Errorf("scheduler: retention %v is negative", c.Retain)
	case c.MaxValueBytes < 0:
		return fmt.Errorf("scheduler: value bound %d is negative", c.MaxValueBytes)
	}
	return nil
}

// Stats counts what the scheduler did since it started.
type Stats struct {
	Commands, Scheduled, Cancelled, Rescheduled, Fired, Republished, Invalid, Forwarded, Forgotten atomic.Int64
	// Ticks counts the ticks processed; Replays the replayed ones, and
	// ReplayScans those that had to scan the partition.
	Ticks, Replays, ReplayScans atomic.Int64
	// Unreadable counts due follow-ups dead-lettered because their user's
	// stored value does not decode.
	Unreadable atomic.Int64
	// Held counts follow-ups scheduled at or before the mark but not yet
	// due by this host's clock; Expired users removed by retention.
	Held, Expired atomic.Int64
	// Deferred counts follow-ups the calling policy moved (at scheduling,
	// or again after a policy change); Parked due follow-ups a tick did
	// not fire because a policy change made them wait; Advanced deferred
	// follow-ups moved earlier because a policy change allows it.
	Deferred, Parked, Advanced atomic.Int64
	// Retries counts attempts scheduled after a call ended unanswered;
	// Ended follow-ups whose final outcome was reported (answered,
	// exhausted, too old, cancelled while placed); EndedRepeats outcomes
	// reported again (replays), EndedUnknown outcomes of calls the user's
	// value does not hold (forgotten users).
	Retries, Ended, EndedRepeats, EndedUnknown atomic.Int64
	// FiredTrimmed counts fired follow-ups dropped from users' histories,
	// beyond FiredHistory, to keep their values within MaxValueBytes.
	FiredTrimmed atomic.Int64
	// Suppressed counts due follow-ups not called because their number is
	// on the do-not-call list (reported KIND_SUPPRESSED).
	Suppressed atomic.Int64
}

// Scheduler holds the callbacks and the punctuator of the scheduler processor.
type Scheduler struct {
	cfg   Config
	punct *dueindex.Punctuator
	dlq   *deadletter.Writer
	Stats Stats
}

// New returns a scheduler. send produces a tick to a partition of the ticks
// topic (see TickSender); it may be nil when ticks are fed by hand (tests).
func New(cfg Config, send func(partition int32, through dueindex.Pos) error) (*Scheduler, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc := dueindex.Config{MinGap: cfg.TickGap, Retain: cfg.Retain}
	pc.Table = string(cfg.Topics.SchedulerTable())
	pc.Parse = ParseValue
	keys := topology.TickKeys(max(cfg.Partitions, 1))
	pc.MarkKey = func(part int32) string {
		if int(part) < len(keys) {
			return keys[part]
		}
		return ""
	}
	pc.Send = send
	// An idle partition is ticked once after a policy change, for its
	// tick to sweep the deferred follow-ups (sweepDeferred).
	pc.Version = func() string { return version(cfg.Policy()) }
	pc.Clock = cfg.Clock
	pc.Logger = cfg.Logger
	p, err := dueindex.New(pc)
	if err != nil {
		return nil, err
	}
	dlq := &deadletter.Writer{Topic: cfg.Topics.SchedulerDLQ, Group: cfg.Topics.Scheduler, Clock: cfg.Clock, Logger: cfg.Logger, MaxBytes: cfg.MaxValueBytes}
	return &Scheduler{cfg: cfg, punct: p, dlq: dlq}, nil
}

// Punctuator returns the scheduler's punctuator, to Run beside the processor.
func (s *Scheduler) Punctuator() *dueindex.Punctuator { return s.punct }

// DeadLetters counts the records sent to the dead-letter topic, per reason.
func (s *Scheduler) DeadLetters() map[string]int64 { return s.dlq.Counts() }

// Graph is the scheduler's group graph.
func (s *Scheduler) Graph() *goka.GroupGraph {
	t := s.cfg.Topics
	return goka.DefineGroup(t.Scheduler,
		goka.Input(t.Onboarding, new(codec.Command), s.onCommand),
		goka.Input(t.Ticks, new(codec.Tick), s.onTick),
		goka.Loop(new(codec.Wake), s.onWake),
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

// TickEmitter sends ticks to the ticks topic (a *goka.Emitter); Emit is
// called from the punctuator's goroutine.
type TickEmitter interface {
	Emit(key string, msg any) (*goka.Promise, error)
}

// TickSender returns a send function for New that emits ticks with em, one
// key per partition of the ticks topic, stamped with clk (nil: the wall clock).
func TickSender(em TickEmitter, partitions int32, clk clock.Clock, log *slog.Logger) func(int32, dueindex.Pos) error {
	keys := topology.TickKeys(partitions)
	if clk == nil {
		clk = clock.Real{}
	}
	return func(p int32, through dueindex.Pos) error {
		if p < 0 || int(p) >= len(keys) {
			return fmt.Errorf("tick for partition %d of %d", p, len(keys))
		}
		prom, err := em.Emit(keys[p], &pb.Tick{Partition: p, SentAt: timestamppb.New(clk.Now()), FiredThrough: position(through)})
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

// state returns the user's table value, or a new one (first). A stored
// value that does not decode is an error: the command is dead-lettered and
// the value kept, rather than replaced by an empty one.
func (s *Scheduler) state(ctx goka.Context) (st *pb.UserState, first bool, err error) {
	switch v := ctx.Value().(type) {
	case *pb.UserState:
		return v, false, nil
	case *codec.Undecodable:
		return nil, false, reject(deadletter.ReasonUnreadableState, "the stored value of user %q does not decode (%v); it is kept as it is, a Forget erases it", ctx.Key(), v.Err)
	}
	return &pb.UserState{UserId: ctx.Key()}, true, nil
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
