// Package dialer is the processor that places the calls published on
// ivr-calls, once per call id, and publishes what becomes of them on
// ivr-results.
//
// Its callbacks never wait for a provider. onCall records a new call in
// flight in its user's value and hands it to the placer (package
// placement), which places it concurrently, under --max-in-flight and
// --cps, and sends the provider's answer to the dialer's loop topic. The
// provider's status callbacks (Publish) go to the same topic. onStatus
// records each status in the user's value and publishes it as a
// CallResult; the call's final outcome is published once (CallResult.final)
// and handed to Config.OnFinal; while the calling policy retries, it is
// also reported to the scheduler (a CallEnded command on the onboarding
// topic), whose retry rules call the follow-up again. onEvent erases a
// user's value when the scheduler forgot or expired the user.
//
// A call id seen before (in flight or recently placed) is dropped, so the
// duplicates that at-least-once delivery produces upstream never reach the
// provider twice. A call recorded in flight and not answered when its
// partition is restored (after a crash or a rebalance) is placed again with
// the same call id, which providers receive as an idempotency key
// (docs/design.md: why nothing is lost or placed twice).
package dialer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"google.golang.org/protobuf/proto"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/deadletter"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/policy"
	"github.com/ivrsched/ivrsched/topology"
)

// Placer places the calls the dialer records in flight (placement.Placer).
//
// Submit is called from the partitions' callbacks, concurrently; it may
// wait while the placer is full, until ctx ends. StorageBuilder wraps the
// dialer table's storage so that the placer follows which calls are in
// flight in the partitions this process owns.
type Placer interface {
	Submit(ctx context.Context, partition int32, call *pb.IVRCall) error
	StorageBuilder(inner storage.Builder) storage.Builder
}

// Emitter sends to the dialer's loop topic (a *goka.Emitter); Emit is
// called concurrently from the status callback handlers.
type Emitter interface {
	Emit(key string, msg any) (*goka.Promise, error)
}

// Config configures the dialer.
type Config struct {
	Topics topology.Topics
	Placer Placer
	// Loop sends status callbacks to the dialer's loop topic.
	Loop Emitter
	// Storage builds the local store of each table partition (wrapped by
	// the placer's); nil means Goka's in-memory storage.
	Storage storage.Builder
	Clock   clock.Clock
	// History is how many placed calls each user's value remembers.
	History int
	// OnFinal, if set, is called with each call's final outcome, once per
	// call id (again only when a crash replays the status that made it
	// final), inside the loop callback of the call's user: on the
	// partition's goroutine, with that callback's context, so what it emits
	// or writes is committed together with the outcome. (The outcome goes
	// to the scheduler's retries before it, see Policy.)
	OnFinal func(ctx goka.Context, result *pb.CallResult)
	// Policy returns the calling policy in force (nil func, or nil policy:
	// none). While it retries any outcome, each call's final outcome is
	// reported to the scheduler (a CallEnded command), which retries or
	// ends the follow-up. Called from every partition goroutine: it must be
	// cheap and safe for concurrent use.
	Policy func() *policy.Policy
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.History <= 0 {
		c.History = 64
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Storage == nil {
		c.Storage = storage.MemoryBuilder()
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Topics.Dialer == "":
		return errors.New("dialer: no topic names")
	case c.Placer == nil:
		return errors.New("dialer: no placer")
	case c.Loop == nil:
		return errors.New("dialer: no loop emitter")
	}
	return nil
}

// Stats counts what the dialer did since it started.
type Stats struct {
	// Accepted calls were recorded in flight and handed to the placer.
	Accepted, Duplicates, Invalid atomic.Int64
	// Placed and Failed count the placements' answers recorded.
	Placed, Failed atomic.Int64
	// Statuses recorded from status callbacks; Late ones came after the
	// call's final outcome and were ignored; Unknown ones were for calls
	// the user's value does not hold (forgotten, or long ago): published,
	// not recorded.
	Statuses, Late, Unknown atomic.Int64
	// Finals published; Forgotten users erased; Reported final outcomes
	// sent to the scheduler for its retry rules.
	Finals, Forgotten, Reported atomic.Int64
	// finals counts the finals published by outcome (Outcome reads it).
	finals [outcomes]atomic.Int64
}

// outcomes bounds the Outcome values counted by Stats.Outcome; a larger
// one (a newer contract) is counted as OUTCOME_UNSPECIFIED.
const outcomes = 16

// Outcome is how many final results with outcome o were published.
func (s *Stats) Outcome(o pb.Outcome) int64 {
	if o < 0 || o >= outcomes {
		return 0
	}
	return s.finals[o].Load()
}

func (s *Stats) final(o pb.Outcome) {
	if o < 0 || o >= outcomes {
		o = pb.Outcome_OUTCOME_UNSPECIFIED
	}
	s.Finals.Add(1)
	s.finals[o].Add(1)
}

// Dialer holds the dialer's callbacks.
type Dialer struct {
	cfg   Config
	dlq   *deadletter.Writer
	Stats Stats
}

// New returns a dialer.
func New(cfg Config) (*Dialer, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dlq := &deadletter.Writer{Topic: cfg.Topics.DialerDLQ, Group: cfg.Topics.Dialer, Clock: cfg.Clock, Logger: cfg.Logger}
	return &Dialer{cfg: cfg, dlq: dlq}, nil
}

// DeadLetters counts the records sent to the dead-letter topic, per reason.
func (d *Dialer) DeadLetters() map[string]int64 { return d.dlq.Counts() }

// Graph is the dialer's group graph.
func (d *Dialer) Graph() *goka.GroupGraph {
	t := d.cfg.Topics
	return goka.DefineGroup(t.Dialer,
		goka.Input(t.Calls, new(codec.IVRCall), d.onCall),
		goka.Input(t.Events, new(codec.ScheduleEvent), d.onEvent),
		goka.Loop(new(codec.CallStatus), d.onStatus),
		goka.Output(t.Results, new(codec.CallResult)),
		goka.Output(t.Onboarding, new(codec.Command)), // outcomes, for the scheduler's retries
		d.dlq.Edge(),
		goka.Persist(new(codec.DialerState)),
	)
}

// Processor builds the Goka processor; opts wire it to a cluster or a tester.
func (d *Dialer) Processor(brokers []string, opts ...goka.ProcessorOption) (*goka.Processor, error) {
	opts = append(opts, goka.WithStorageBuilder(d.cfg.Placer.StorageBuilder(d.cfg.Storage)))
	p, err := goka.NewProcessor(brokers, d.Graph(), opts...)
	if err != nil {
		return nil, fmt.Errorf("dialer processor: %w", err)
	}
	return p, nil
}

func (d *Dialer) value(ctx goka.Context) *pb.DialerState {
	st, _ := ctx.Value().(*pb.DialerState)
	if st == nil {
		st = &pb.DialerState{}
	}
	return st
}

func (d *Dialer) onCall(ctx goka.Context, msg any) {
	call, ok := msg.(*pb.IVRCall)
	switch {
	case !ok:
		d.undecodable(ctx, msg)
		return
	case call.GetCallId() == "":
		d.Stats.Invalid.Add(1)
		b, _ := proto.Marshal(call)
		d.dlq.Send(ctx, deadletter.ReasonMissingCallID, "an IVRCall needs a call id", b)
		return
	}
	st := d.value(ctx)
	if inFlight(st, call.GetCallId()) >= 0 || record(st, call.GetCallId()) != nil {
		d.Stats.Duplicates.Add(1)
		return
	}
	if call.GetUserId() == "" {
		call.UserId = ctx.Key()
	}
	st.InFlight = append(st.InFlight, call)
	ctx.SetValue(st)
	d.Stats.Accepted.Add(1)
	if err := d.cfg.Placer.Submit(ctx.Context(), ctx.Partition(), call); err != nil && ctx.Context().Err() == nil {
		// Not stopping, so this partition should be the placer's: restart
		// it (the input replays, and the restored partition places what it
		// holds in flight).
		ctx.Fail(fmt.Errorf("dialer: hand call %s to the placer: %w", call.GetCallId(), err))
	}
	// Stopping: the call stays in flight in the table, and the partition's
	// next owner places it.
}

// undecodable dead-letters a record that did not decode.
func (d *Dialer) undecodable(ctx goka.Context, msg any) {
	d.Stats.Invalid.Add(1)
	u, _ := msg.(*codec.Undecodable)
	d.dlq.Send(ctx, deadletter.ReasonUndecodable, fmt.Sprint(msg), u.GetData())
}

// inFlight is the index of a call in flight in st, or -1.
func inFlight(st *pb.DialerState, id string) int {
	for i, c := range st.GetInFlight() {
		if c.GetCallId() == id {
			return i
		}
	}
	return -1
}

// record is the record of a placed call in st, or nil.
func record(st *pb.DialerState, id string) *pb.DialRecord {
	for _, r := range st.GetCalls() {
		if r.GetCallId() == id {
			return r
		}
	}
	return nil
}

// onEvent forgets a user the scheduler forgot (a Forget command) or expired
// (retention): the user's value is deleted, a tombstone in the changelog,
// and the user's calls in flight with it; a call still queued in the placer
// is then not placed. Other events are none of the dialer's business.
func (d *Dialer) onEvent(ctx goka.Context, msg any) {
	ev, ok := msg.(*pb.ScheduleEvent)
	if !ok {
		d.undecodable(ctx, msg)
		return
	}
	switch ev.GetKind() {
	case pb.ScheduleEvent_KIND_FORGOTTEN, pb.ScheduleEvent_KIND_EXPIRED:
		if ctx.Value() != nil {
			ctx.Delete()
		}
		d.Stats.Forgotten.Add(1)
	}
}
