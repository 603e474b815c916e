package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gorilla/mux"
	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/ivrsched/ivrsched/codec"
	"github.com/ivrsched/ivrsched/internal/app/metrics"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/policy"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
	"github.com/ivrsched/ivrsched/internal/providers/twilio"
	"github.com/ivrsched/ivrsched/internal/providers/webhook"
	"github.com/ivrsched/ivrsched/internal/suppress"
	"github.com/ivrsched/ivrsched/processors/dialer"
	"github.com/ivrsched/ivrsched/processors/dialer/placement"
	"github.com/ivrsched/ivrsched/topology"
)

// statsEvery is how often the dialer logs what it did (when it did anything).
const statsEvery = 30 * time.Second

// startDialer builds the dialer role: its local stores (which index the
// users with calls in flight), the loop emitter the placer and the status
// callbacks send to, the placer (run in g until ctx ends, then the emitter
// is flushed) and the status callback endpoints on router (the callback
// listener's). pol is the calling policy in force, whose retry rules
// decide whether calls' outcomes go to the scheduler; sup the do-not-call
// list the placer checks before each call; its processors take no input
// before gate is closed (the policy and the list have been read).
func startDialer(ctx context.Context, g *errgroup.Group, cfg Config, opts []goka.ProcessorOption, router *mux.Router, reg prometheus.Registerer, pol func() *policy.Policy, sup suppress.Checker, gate <-chan struct{}, log *slog.Logger) (*dialer.Dialer, *placement.Placer, *role, error) {
	dlog := log.With("role", "dialer")
	stores := newStores(ctx, cfg, "dialer", log)
	stores.Mark(placement.HasInFlight)
	loop, err := kafkaclient.NewRevivingEmitter("dialer loop", cfg.Clock, dlog,
		kafkaclient.GokaEmitter(cfg.Kafka.Brokers, cfg.Topics.DialerLoop(), new(codec.CallStatus), cfg.Kafka.EmitterOptions()...))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("dialer loop emitter: %w", err)
	}
	prov := cfg.Provider
	if prov == nil {
		prov = provider.Log{Logger: dlog}
	}
	latency, wait := metrics.ProviderLatency(), metrics.RateLimitWait()
	pl, err := placement.New(placement.Config{
		Provider:     prov,
		Results:      loop,
		Table:        string(cfg.Topics.DialerTable()),
		Calls:        string(cfg.Topics.Calls),
		Events:       string(cfg.Topics.Events),
		Loop:         string(cfg.Topics.DialerLoop()),
		Partitions:   cfg.Kafka.Partitions,
		MaxInFlight:  cfg.MaxInFlight,
		CPS:          cfg.CPS,
		CallTimeout:  cfg.CallTimeout,
		Deadline:     cfg.CallDeadline,
		Latency:      latency,
		RateWait:     wait,
		Suppressions: sup,
		Clock:        cfg.Clock,
		Logger:       dlog,
	})
	if err != nil {
		return nil, nil, nil, errors.Join(err, loop.Finish())
	}
	d, err := dialer.New(dialer.Config{
		Topics:  cfg.Topics,
		Placer:  pl,
		Loop:    loop,
		Storage: stores.Builder(),
		Clock:   cfg.Clock,
		Policy:  pol,
		Logger:  dlog,
		// Each call's record keeps its number's keyed hash, for opt-outs.
		NumberKey: numberKey(cfg.SuppressionKey),
		// The dialer's table is written by a producer configured alike.
		MaxValueBytes: kafkaclient.ValueBound(cfg.Kafka.Sarama()),
	})
	if err != nil {
		return nil, nil, nil, errors.Join(err, loop.Finish())
	}
	if err := register(reg, latency, wait, metrics.Dialer(d, pl)); err != nil {
		return nil, nil, nil, errors.Join(err, loop.Finish())
	}
	g.Go(func() error {
		err := pl.Run(ctx)
		return errors.Join(err, loop.Finish())
	})
	var cbs []*provider.CallbackStats
	if c := cfg.TwilioCallback; c != nil {
		c.Sink = d
		router.Handle(twilio.CallbackPath, c)
		router.Handle(twilio.GatherPath, c.Gather()) // opt-outs by keypress
		cbs = append(cbs, &c.Stats)
	}
	if c := cfg.WebhookCallback; c != nil {
		c.Sink = d
		router.Handle(webhook.CallbackPath, c)
		cbs = append(cbs, &c.Stats)
	}
	g.Go(func() error { logDialer(ctx, d, pl, cbs, dlog); return nil })
	r := newRole("dialer", string(cfg.Topics.DialerTable()), log, cfg.Clock, func(extra ...goka.ProcessorOption) (*goka.Processor, error) {
		opts := append(withStores(opts, stores, cfg.Kafka), cfg.Kafka.LoopRetention(topology.DialerLoopRetention))
		return d.Processor(cfg.Kafka.Brokers, append(opts, extra...)...)
	})
	r.gate = gate
	// ivr-calls is committed up to the first call whose status is not
	// recorded (placement, docs/design.md "The dialer").
	r.commits = pl
	r = r.supervised(cfg.Kafka, cfg.Topics.Dialer)
	r.stores = stores
	return d, pl, r, nil
}

// logDialer logs the dialer's counts every statsEvery while they change.
func logDialer(ctx context.Context, d *dialer.Dialer, pl *placement.Placer, cbs []*provider.CallbackStats, log *slog.Logger) {
	var last []int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(statsEvery):
		}
		s, p := &d.Stats, &pl.Stats
		var accepted, refused int64
		for _, c := range cbs {
			accepted += c.Accepted.Load()
			refused += c.Rejected.Load()
		}
		now := []int64{s.Accepted.Load(), s.Duplicates.Load(), p.Requests.Load(), s.Placed.Load(), s.Failed.Load(), p.TooMany.Load(),
			p.ServerErrors.Load(), s.Finals.Load(), accepted, refused, s.Forgotten.Load(), s.Reported.Load(), s.FiredBeforeForget.Load()}
		if fmt.Sprint(now) == fmt.Sprint(last) {
			continue
		}
		last = now
		log.Info("dialer", "calls", now[0], "duplicates", now[1], "requests", now[2], "placed", now[3], "failed", now[4],
			"answered_429", now[5], "answered_5xx", now[6], "finals", now[7], "callbacks", now[8], "callbacks_refused", now[9],
			"forgotten", now[10], "outcomes_to_scheduler", now[11], "fired_before_forget", now[12], "queued", p.Queued.Load(), "placing", p.Placing.Load(), "cps", pl.Rate())
	}
}

// numberKey is the dialer's hash of numbers: the suppression key's (nil
// without a key).
func numberKey(k suppress.Key) func(string) []byte {
	if len(k) == 0 {
		return nil
	}
	return (&suppress.Hasher{Key: k}).Sum // one per dialer: its HMACs reused
}
