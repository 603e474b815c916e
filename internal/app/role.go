package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/localstore"
	"github.com/ivrsched/ivrsched/topology"
	"github.com/lovoo/goka"
)

// role supervises one processor: it rebuilds and restarts it with backoff
// when it fails, and logs the recovery of its table partitions.
type role struct {
	name, table string
	log         *slog.Logger
	// newProcessor builds the role's processor with the given options added
	// last (extra).
	newProcessor func(extra ...goka.ProcessorOption) (*goka.Processor, error)
	extra        []goka.ProcessorOption
	clock        clock.Clock
	// probe reports whether the brokers answer; nil: always.
	probe func(context.Context) error
	// leave takes a failed processor's member out of its consumer group,
	// so the rebuilt one need not wait for it to time out; nil: nothing.
	leave func(context.Context) error
	cur   atomic.Pointer[goka.Processor]
	// parts is the partition count of the role's topics (get); 0: unknown.
	parts     int32
	ready     chan struct{} // closed when the first processor is ready
	readyOnce sync.Once
	// restarting is set from a processor's failure until its successor
	// is ready (readiness, /readyz).
	restarting atomic.Bool
	// indexed, if set, reports whether an owned partition is ready beyond
	// its restored table: the scheduler's due index. Called from any
	// goroutine.
	indexed func(part int32) bool
	// sessionEnded, if set, is told at the end of each consumer group
	// session whether it ended cleanly (no partition failed); set before
	// supervised.
	sessionEnded func(clean bool)
	// gate, if set, is closed once the role's callbacks may run (the
	// calling policy has been read); its processors restore their
	// partitions meanwhile. Set before supervised.
	gate <-chan struct{}
	// commits, if set, sees the marks of the role's consumer group before
	// they are committed in order (kafkaclient.HoldCommits); set before
	// supervised.
	commits kafkaclient.CommitKeeper
	// stores are the role's local table stores (restore progress); nil
	// in tests that build roles by hand.
	stores *localstore.Stores
}

const (
	minBackoff      = time.Second
	maxBackoff      = 30 * time.Second
	probeEvery      = 500 * time.Millisecond
	progressEvery   = 2 * time.Second
	healthyRunReset = 2 * time.Minute
)

func newRole(name, table string, log *slog.Logger, clk clock.Clock, newProcessor func(extra ...goka.ProcessorOption) (*goka.Processor, error)) *role {
	if clk == nil {
		clk = clock.Real{}
	}
	return &role{name: name, table: table, log: log.With("role", name), clock: clk, newProcessor: newProcessor, ready: make(chan struct{})}
}

// supervised gives the role what its supervisor needs against a cluster:
// a probe of the brokers, and the consumer group membership of its
// processors, to take a failed one out of group.
func (r *role) supervised(k kafkaclient.Kafka, group goka.Group) *role {
	r.parts = int32(k.Partitions)
	probe := k
	probe.DialTimeout = time.Second
	r.probe = func(ctx context.Context) error {
		c, err := probe.Connect(ctx)
		if err != nil {
			return err
		}
		return c.Close()
	}
	m := &kafkaclient.Membership{Kafka: k, Group: string(group), Ended: r.sessionEnded, Gate: r.gate, Commits: r.commits}
	r.leave = m.Leave
	r.extra = append(r.extra, m.Option())
	return r
}

// build builds a new processor for the role.
func (r *role) build() (*goka.Processor, error) { return r.newProcessor(r.extra...) }

// errNotReady: a table lookup that reached a partition whose table is not
// yet restored (the admin API answers it 503).
var errNotReady = errors.New("not ready: partitions recovering")

// get looks a key up in the current processor's table (owned partitions),
// for the admin API and Goka's query page; errNotReady before the
// processor runs or while the key's partition restores. Goka's Get reads
// the partition's store unguarded, nil until the store is open, so get
// asks it only of a restored partition. A rebalance between that check
// and the read can still hand Goka a new partition with no store: that
// panic, Goka's, is also answered errNotReady.
func (r *role) get(key string) (v any, err error) {
	p := r.cur.Load()
	if p == nil || p.StateReader().State() != goka.ProcStateRunning {
		return nil, errNotReady
	}
	restored := func(part int32, ps *goka.PartitionProcStats) bool {
		return ps.TableStats == nil || ps.TableStats.Status == goka.PartitionRunning
	}
	for part, ps := range p.Stats().Group {
		// Without the partition count (a role built by hand), every owned
		// partition must be restored.
		if (r.parts == 0 || part == topology.Partition(key, r.parts)) && !restored(part, ps) {
			return nil, errNotReady
		}
	}
	defer func() {
		if rec := recover(); rec != nil {
			r.log.Warn("table lookup during a rebalance", "panic", rec)
			v, err = nil, errNotReady
		}
	}()
	return p.Get(key)
}

// supervise runs p, then rebuilt processors, until ctx ends.
//
// After a failure it waits before it rebuilds: at least minBackoff, then,
// while the brokers do not answer, until they do (probing every
// probeEvery, one metadata request, so a broker that is down is not
// hammered), and it rebuilds within about probeEvery of their answer. A
// processor that fails while the brokers answer is a fault of its own: the
// wait doubles (to maxBackoff) until a run stays healthy for
// healthyRunReset. Before it rebuilds, it takes the failed processor's
// member out of the consumer group (leave), so the group does not wait
// for that member's session to time out.
func (r *role) supervise(ctx context.Context, p *goka.Processor) error {
	backoff := minBackoff
	for {
		var err error
		if p != nil {
			r.cur.Store(p)
			began := r.clock.Now()
			err = r.runOnce(ctx, p)
			if ctx.Err() != nil {
				return nil
			}
			if r.clock.Now().Sub(began) > healthyRunReset {
				backoff = minBackoff
			}
			if err == nil {
				err = errors.New("processor stopped on its own")
			}
		}
		r.restarting.Store(true)
		r.log.Error("processor failed; restarting", "err", err, "backoff", backoff)
		brokersDown, err := r.pause(ctx, backoff)
		if err != nil {
			return nil
		}
		if !brokersDown {
			backoff = min(2*backoff, maxBackoff)
		}
		if r.leave != nil {
			if err := r.leave(ctx); err != nil {
				r.log.Warn("take the failed processor out of its group", "err", err)
			}
		}
		if p, err = r.build(); err != nil {
			p = nil
			r.log.Error("rebuild processor", "err", err)
		}
	}
}

// pause waits before a rebuild: minBackoff, then until the brokers answer
// if they did not (brokersDown), else until backoff has passed. It returns
// an error only when ctx ends.
func (r *role) pause(ctx context.Context, backoff time.Duration) (brokersDown bool, err error) {
	start := r.clock.Now()
	if err := r.sleep(ctx, minBackoff); err != nil {
		return false, err
	}
	for r.probe != nil && r.probe(ctx) != nil {
		if !brokersDown {
			r.log.Warn("brokers do not answer; waiting for them", "probe_every", probeEvery)
		}
		brokersDown = true
		if err := r.sleep(ctx, probeEvery); err != nil {
			return true, err
		}
	}
	if brokersDown {
		r.log.Info("brokers answer again", "after", r.clock.Now().Sub(start).Round(time.Millisecond))
		return true, nil
	}
	return false, r.sleep(ctx, backoff-r.clock.Now().Sub(start))
}

func (r *role) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-r.clock.After(d):
		return nil
	}
}

// runOnce runs p and watches its start: recovery progress, then ready.
func (r *role) runOnce(ctx context.Context, p *goka.Processor) error {
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go r.watch(wctx, p)
	if err := p.Run(ctx); err != nil {
		return fmt.Errorf("%s processor: %w", r.name, err)
	}
	return nil
}

func (r *role) watch(ctx context.Context, p *goka.Processor) {
	ready := make(chan struct{})
	go func() {
		if p.WaitForReadyContext(ctx) != nil || ctx.Err() != nil {
			return
		}
		if r.gate != nil {
			select {
			case <-r.gate:
			case <-ctx.Done():
				return
			}
		}
		close(ready)
	}()
	running := func() {
		r.log.Info("processor running", "partitions", len(p.Stats().Group))
		r.restarting.Store(false)
		r.readyOnce.Do(func() { close(r.ready) })
	}
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	last := map[int32]int64{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ready:
			running()
			return
		case <-t.C:
			// Goka's WaitForReady waits for the partition processors it
			// saw when the processor last ran; after a session that ended
			// during its Setup (a rebalance at start) those are stopped
			// and it never returns. Ask the processor as /readyz does.
			if p.StateReader().State() == goka.ProcStateRunning && len(r.partitionsWait(p)) == 0 && r.gateOpen() {
				running()
				return
			}
			r.logRecovery(p, last)
		}
	}
}

// logRecovery logs each partition still restoring its table from the changelog.
func (r *role) logRecovery(p *goka.Processor, last map[int32]int64) {
	for part, st := range p.StatsWithContext(context.Background()).Group {
		ts := st.TableStats
		if ts == nil || ts.Status != goka.PartitionRecovering || ts.Recovery == nil {
			continue
		}
		off, hwm := ts.Recovery.Offset, ts.Recovery.Hwm
		pct := 100.0
		if hwm > 0 {
			pct = 100 * float64(off+1) / float64(hwm)
		}
		rate := float64(off-last[part]) / progressEvery.Seconds()
		if _, seen := last[part]; !seen {
			rate = 0
		}
		last[part] = off
		r.log.Info("restoring table from changelog", "table", r.table, "partition", part,
			"offset", off, "end", hwm, "percent", fmt.Sprintf("%.1f", pct), "records_per_s", int64(rate),
			"since", time.Since(ts.Recovery.StartTime).Round(time.Second))
	}
}

// gateOpen reports whether the role's callbacks may run (gate).
func (r *role) gateOpen() bool {
	if r.gate == nil {
		return true
	}
	select {
	case <-r.gate:
		return true
	default:
		return false
	}
}
