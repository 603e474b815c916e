// Package dialer is the processor that places the calls published on
// ivr-calls through a Provider, once per call id, and publishes each outcome
// on ivr-results.
//
// The dialer's group table holds, per user, the ids of the calls recently
// handled. A call id seen before is dropped, so the duplicates that
// at-least-once delivery produces upstream never reach the provider twice.
// If the dialer dies between placing a call and recording it, the replay
// places it again with the same call id: providers receive the call id as
// an idempotency key.
package dialer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/deadletter"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/topology"
)

// Provider places phone calls.
//
// Contract: call.CallId is an idempotency key. A provider that receives the
// same call id twice must place the call at most once. Place must return
// when ctx ends.
type Provider interface {
	Place(ctx context.Context, call *pb.IVRCall) (Result, error)
}

// Result is what the provider reports for a call.
type Result struct {
	Outcome pb.Outcome
	Detail  string
}

// LogProvider places no call; it logs it and reports it placed. It is the
// default provider, for demos and dry runs.
type LogProvider struct{ Logger *slog.Logger }

// Place logs the call.
func (p LogProvider) Place(_ context.Context, c *pb.IVRCall) (Result, error) {
	l := p.Logger
	if l == nil {
		l = slog.Default()
	}
	if !l.Enabled(context.Background(), slog.LevelInfo) {
		return Result{Outcome: pb.Outcome_OUTCOME_PLACED}, nil // skip building the record
	}
	l.Info("call placed (log provider)", "call_id", c.GetCallId(), "user", c.GetUserId(), "task", c.GetTaskId(),
		"phone", c.GetPhone(), "script", c.GetAction().GetIvrScript(), "due_at", c.GetDueAt().AsTime(),
		"lateness", c.GetFiredAt().AsTime().Sub(c.GetDueAt().AsTime()))
	return Result{Outcome: pb.Outcome_OUTCOME_PLACED}, nil
}

// Config configures the dialer.
type Config struct {
	Topics   topology.Topics
	Provider Provider
	// Storage builds the local store of each table partition; nil means Goka's default.
	Storage storage.Builder
	Clock   clock.Clock
	// CallTimeout bounds one provider call; a call that times out is failed.
	CallTimeout time.Duration
	// History is how many handled call ids each user's state remembers.
	History int
	Logger  *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 10 * time.Second
	}
	if c.History <= 0 {
		c.History = 64
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Provider == nil {
		c.Provider = LogProvider{Logger: c.Logger}
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.Topics.Dialer == "" {
		return errors.New("dialer: no topic names")
	}
	return nil
}

// Stats counts what the dialer did since it started.
type Stats struct {
	Placed, Failed, Duplicates, Invalid atomic.Int64
}

// Dialer holds the dialer's callback.
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

// Graph is the dialer's group graph.
func (d *Dialer) Graph() *goka.GroupGraph {
	t := d.cfg.Topics
	return goka.DefineGroup(t.Dialer,
		goka.Input(t.Calls, new(codec.IVRCall), d.onCall),
		goka.Output(t.Results, new(codec.CallResult)),
		d.dlq.Edge(),
		goka.Persist(new(codec.DialerState)),
	)
}

// Processor builds the Goka processor; opts wire it to a cluster or a tester.
func (d *Dialer) Processor(brokers []string, opts ...goka.ProcessorOption) (*goka.Processor, error) {
	if d.cfg.Storage != nil {
		opts = append(opts, goka.WithStorageBuilder(d.cfg.Storage))
	}
	p, err := goka.NewProcessor(brokers, d.Graph(), opts...)
	if err != nil {
		return nil, fmt.Errorf("dialer processor: %w", err)
	}
	return p, nil
}

func (d *Dialer) onCall(ctx goka.Context, msg any) {
	call, ok := msg.(*pb.IVRCall)
	switch {
	case !ok:
		d.Stats.Invalid.Add(1)
		u, _ := msg.(*codec.Undecodable)
		d.dlq.Send(ctx, deadletter.ReasonUndecodable, fmt.Sprint(msg), u.GetData())
		return
	case call.GetCallId() == "":
		d.Stats.Invalid.Add(1)
		b, _ := proto.Marshal(call)
		d.dlq.Send(ctx, deadletter.ReasonMissingCallID, "an IVRCall needs a call id", b)
		return
	}
	st, _ := ctx.Value().(*pb.DialerState)
	if st == nil {
		st = &pb.DialerState{}
	}
	for _, r := range st.GetCalls() {
		if r.GetCallId() == call.GetCallId() {
			d.Stats.Duplicates.Add(1)
			return
		}
	}

	cctx, cancel := context.WithTimeout(ctx.Context(), d.cfg.CallTimeout)
	res, err := d.cfg.Provider.Place(cctx, call)
	cancel()
	if err != nil {
		res = Result{Outcome: pb.Outcome_OUTCOME_FAILED, Detail: err.Error()}
	}
	if res.Outcome == pb.Outcome_OUTCOME_FAILED {
		d.Stats.Failed.Add(1)
		d.cfg.Logger.Warn("call failed", "call_id", call.GetCallId(), "user", ctx.Key(), "detail", res.Detail)
	} else {
		d.Stats.Placed.Add(1)
	}
	now := timestamppb.New(d.cfg.Clock.Now())
	st.Calls = append(st.Calls, &pb.DialRecord{CallId: call.GetCallId(), Outcome: res.Outcome, At: now})
	if n := len(st.Calls) - d.cfg.History; n > 0 {
		st.Calls = append(st.Calls[:0:0], st.Calls[n:]...)
	}
	ctx.SetValue(st)
	ctx.Emit(d.cfg.Topics.Results, ctx.Key(), &pb.CallResult{
		CallId: call.GetCallId(), UserId: call.GetUserId(), TaskId: call.GetTaskId(), Attempt: call.GetAttempt(),
		Outcome: res.Outcome, Detail: res.Detail, At: now,
	})
}
