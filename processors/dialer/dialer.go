// Package dialer is the processor that places the calls published on
// ivr-calls, once per call id, and publishes what becomes of them on
// ivr-results.
//
// Its callbacks never wait for a provider. onCall hands a new call to the
// placer (package placement), which places it concurrently, under
// --max-in-flight and --cps, and sends the provider's answer to the
// dialer's loop topic; it writes nothing: calls in flight are the
// uncommitted tail of ivr-calls (the placer commits ivr-calls in order, up
// to the first call whose status is not recorded). The provider's status
// callbacks (Publish) go to the same topic. onStatus records each status
// in the user's value (the first one creates the call's record) and
// publishes it as a CallResult; the call's final outcome is published once
// (CallResult.final) and handed to Config.OnFinal; while the calling policy
// retries, it is also reported to the scheduler (a CallEnded command on the
// onboarding topic), whose retry rules call the follow-up again. onEvent
// erases a user's value when the scheduler forgot or expired the user.
//
// A call id seen before (held by the placer or recently placed) is
// dropped, so the duplicates that at-least-once delivery produces upstream
// never reach the provider twice. A call whose status was not recorded
// when its partition moved (after a crash or a rebalance) is consumed
// again from ivr-calls and placed again with the same call id, which
// providers receive as an idempotency key (docs/design.md: why nothing is
// lost or placed twice).
package dialer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	gokacodec "github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/policy"
	"github.com/ivrsched/ivrsched/topology"
)

// Placer places the dialer's calls and keeps the commits of ivr-calls
// (placement.Placer).
//
// Every ivr-calls record goes to Submit (a call to place: false if the
// placer holds its call id already) or Track (a record dropped), with its
// offset, in offset order; every followup-events record to Forget (a
// user's calls are not to be placed, with the Forget's place in the
// partition's order as a time, forgetTime; zero for an expiry) or Event
// (nothing to do). Forgotten, asked of each call before Submit or Track
// (with the call's place as its fired_at, inOrder), says whether the call
// was fired before a Forget of its user consumed already (then it is
// dropped). Record tells it that a status recorded the call (it returns the
// call if the placer held it). All are called from the partitions' callbacks,
// concurrently across partitions; Submit may wait while the placer is full,
// until ctx ends. StorageBuilder wraps the dialer table's storage so that the
// placer knows the partitions this process owns.
type Placer interface {
	Submit(ctx context.Context, partition int32, offset int64, call *pb.IVRCall) (bool, error)
	Track(partition int32, offset int64)
	Record(partition int32, user, callID string, loopOffset int64) *pb.IVRCall
	Event(partition int32, offset int64)
	Forget(partition int32, user string, at time.Time, offset int64)
	Forgotten(partition int32, call *pb.IVRCall) bool
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
	// MaxValueBytes bounds a user's encoded value: a value that would be
	// larger loses its oldest records first. 0: what the table's producer
	// accepts by Sarama's default Producer.MaxMessageBytes
	// (kafkaclient.ValueBound). It bounds each dead letter's record too
	// (deadletter.Writer.MaxBytes).
	MaxValueBytes int
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
	// NumberKey returns the keyed hash of a number (suppress.Key.Sum):
	// each call's record keeps its number's, so that an opt-out reported
	// for the call lists that number (optout.go). nil: records keep none,
	// and an opt-out lists nothing.
	NumberKey func(number string) []byte
	Logger    *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.History <= 0 {
		c.History = 64
	}
	if c.MaxValueBytes <= 0 {
		c.MaxValueBytes = kafkaclient.ValueBound(sarama.NewConfig())
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
	// Accepted calls were handed to the placer.
	Accepted, Duplicates, Invalid atomic.Int64
	// Placed and Failed count the placements' answers recorded.
	Placed, Failed atomic.Int64
	// Statuses recorded from status callbacks; Late ones came after the
	// call's final outcome and were ignored; Unknown ones were for calls
	// neither the user's value nor the placer holds (the user forgotten,
	// or long ago): published, not recorded.
	Statuses, Late, Unknown atomic.Int64
	// Finals published; Forgotten users erased; Reported final outcomes
	// sent to the scheduler for its retry rules.
	Finals, Forgotten, Reported atomic.Int64
	// Trimmed counts the records dropped, oldest first, to keep a user's
	// value within MaxValueBytes.
	Trimmed atomic.Int64
	// OptOuts counts the numbers listed because their call's recipient
	// opted out; OptOutsIgnored the opt-outs not listed: of an unknown
	// call, of another provider call, or of a record without a number.
	OptOuts, OptOutsIgnored atomic.Int64
	// FiredBeforeForget: calls consumed after their user's Forget that the
	// scheduler fired before it (ivr-calls lagging behind followup-events):
	// dropped, not placed.
	FiredBeforeForget atomic.Int64
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
	dlq := &deadletter.Writer{Topic: cfg.Topics.DialerDLQ, Group: cfg.Topics.Dialer, Clock: cfg.Clock, Logger: cfg.Logger, MaxBytes: cfg.MaxValueBytes}
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
		goka.Output(t.Onboarding, new(codec.Command)),                  // outcomes, for the scheduler's retries
		goka.Output(goka.Stream(t.Suppressions), new(gokacodec.Bytes)), // opt-outs (optout.go)
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

// value returns the user's stored value (nil: none), or the stored bytes
// when they do not decode. Such a value is never read as empty: the calls
// it recorded are unknown, so a call to the user is not placed (it could be
// one of them) and a status is not written over it; it is kept as it is
// until a Forget erases it (onEvent).
func (d *Dialer) value(ctx goka.Context) (*pb.DialerState, *codec.Undecodable) {
	switch v := ctx.Value().(type) {
	case *pb.DialerState:
		return v, nil
	case *codec.Undecodable:
		return nil, v
	}
	return nil, nil
}

// unreadable dead-letters the record being processed (value: its bytes),
// which needed the user's stored value, bad, as unreadable_state.
func (d *Dialer) unreadable(ctx goka.Context, bad *codec.Undecodable, what string, msg any) {
	d.dlq.Send(ctx, deadletter.ReasonUnreadableState, fmt.Sprintf("the dialer's stored value of user %q does not decode (%v): %s; "+
		"the value is kept as it is, a Forget erases it", ctx.Key(), bad.Err, what), deadletter.Value(msg))
}

func (d *Dialer) onCall(ctx goka.Context, msg any) {
	part, offset := ctx.Partition(), ctx.Offset()
	call, ok := msg.(*pb.IVRCall)
	switch {
	case !ok:
		d.cfg.Placer.Track(part, offset)
		d.undecodable(ctx, msg)
		return
	case call.GetCallId() == "":
		d.cfg.Placer.Track(part, offset)
		d.Stats.Invalid.Add(1)
		d.dlq.Send(ctx, deadletter.ReasonMissingCallID, "an IVRCall needs a call id", deadletter.Value(call))
		return
	case longID(ctx.Key(), call) != "":
		// The scheduler publishes no such call; the user's value could not
		// keep its record.
		d.cfg.Placer.Track(part, offset)
		d.Stats.Invalid.Add(1)
		d.dlq.Send(ctx, deadletter.ReasonTooLong, fmt.Sprintf("the call's %s is longer than %d bytes: not placed", longID(ctx.Key(), call), codec.MaxIDBytes), deadletter.Value(call))
		return
	}
	if call.GetUserId() == "" {
		call.UserId = ctx.Key()
	}
	if d.cfg.Placer.Forgotten(part, inOrder(call)) {
		d.cfg.Placer.Track(part, offset)
		d.Stats.FiredBeforeForget.Add(1)
		return
	}
	// Nothing is written: a call in flight is an ivr-calls record not
	// committed yet, and the placer holds it.
	st, bad := d.value(ctx)
	switch {
	case bad != nil:
		// Whether the call was placed before is unknown: not placed.
		d.cfg.Placer.Track(part, offset)
		d.unreadable(ctx, bad, fmt.Sprintf("call %s is not placed, since the calls the value recorded are unknown", call.GetCallId()), call)
		return
	case inFlight(st, call.GetCallId()) >= 0 || record(st, call.GetCallId()) != nil:
		d.cfg.Placer.Track(part, offset)
		d.Stats.Duplicates.Add(1)
		return
	}
	accepted, err := d.cfg.Placer.Submit(ctx.Context(), part, offset, call)
	switch {
	case err != nil && ctx.Context().Err() == nil:
		// Not stopping, so this partition should be the placer's: restart
		// it (the input replays).
		ctx.Fail(fmt.Errorf("dialer: hand call %s to the placer: %w", call.GetCallId(), err))
	case err != nil:
		// Stopping: the call stays uncommitted in ivr-calls, and the
		// partition's next owner places it.
	case accepted:
		d.Stats.Accepted.Add(1)
	default:
		d.Stats.Duplicates.Add(1)
	}
}

// longID names the id of a call (its key, user, call or task id) that is
// longer than the scheduler accepts, or is "".
func longID(key string, c *pb.IVRCall) string {
	for _, id := range [...]struct{ name, v string }{{"key", key}, {"user id", c.GetUserId()}, {"call id", c.GetCallId()}, {"task id", c.GetTaskId()}} {
		if len(id.v) > codec.MaxIDBytes {
			return id.name
		}
	}
	return ""
}

// undecodable dead-letters a record that did not decode.
func (d *Dialer) undecodable(ctx goka.Context, msg any) {
	d.Stats.Invalid.Add(1)
	d.dlq.Send(ctx, deadletter.ReasonUndecodable, fmt.Sprint(msg), deadletter.Value(msg))
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

// unknownTime is the place of a Forget event that carries none (from an
// older scheduler): every call of its user consumed while it is recent is
// dropped.
var unknownTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// The placer drops a call "fired at or before" a recent Forget of its user
// and compares the times the dialer gives it. The dialer gives it places in
// the onboarding partition's order instead of the firing hosts' clocks
// (which differ by their skew, and a rebalance moves a partition between
// hosts): a call's place is the onboarding offset, plus one, of the command
// that created the value it was fired from (IVRCall.created_offset), a
// Forget's is its own offset (ScheduleEvent.forget_offset, also plus one)
// less one. A call fired before the Forget was fired from a value created
// before it, so its place is at or before the Forget's; a call fired after
// it, from a value created after it, is after. orderTime maps a place to
// the time the placer compares.
func orderTime(place int64) time.Time { return time.Unix(0, place) }

// forgetTime is where a Forget event stands in that order.
func forgetTime(ev *pb.ScheduleEvent) time.Time {
	if ev.GetForgetOffset() <= 0 {
		return unknownTime
	}
	return orderTime(ev.GetForgetOffset() - 1)
}

// inOrder is what the placer's Forgotten reads of call: its user and its
// place (none from a value created before the place was recorded: such a
// value was created before any Forget that carries one, and a call without
// a place is dropped while a Forget of its user is recent).
func inOrder(call *pb.IVRCall) *pb.IVRCall {
	c := &pb.IVRCall{UserId: call.GetUserId()}
	if call.GetCreatedOffset() > 0 {
		c.FiredAt = timestamppb.New(orderTime(call.GetCreatedOffset()))
	}
	return c
}

// onEvent forgets a user the scheduler forgot (a Forget command) or expired
// (retention): the user's value is deleted (a tombstone in the changelog)
// and the placer drops the user's calls, value or not: a call still queued
// is then not placed, nor, after a Forget, one fired before it (its place)
// that ivr-calls brings later (an expired user had no call for the
// scheduler's retention). Other events are none of the dialer's business.
func (d *Dialer) onEvent(ctx goka.Context, msg any) {
	ev, ok := msg.(*pb.ScheduleEvent)
	switch {
	case !ok:
		d.cfg.Placer.Event(ctx.Partition(), ctx.Offset())
		d.undecodable(ctx, msg)
	case ev.GetKind() == pb.ScheduleEvent_KIND_FORGOTTEN || ev.GetKind() == pb.ScheduleEvent_KIND_EXPIRED:
		if ctx.Value() != nil {
			ctx.Delete()
		}
		var at time.Time // an expiry: no call of the user is on its way
		if ev.GetKind() == pb.ScheduleEvent_KIND_FORGOTTEN {
			at = forgetTime(ev)
		}
		d.cfg.Placer.Forget(ctx.Partition(), ctx.Key(), at, ctx.Offset())
		d.Stats.Forgotten.Add(1)
	default:
		d.cfg.Placer.Event(ctx.Partition(), ctx.Offset())
	}
}
