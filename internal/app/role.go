package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lovoo/goka"
)

// role supervises one processor: it rebuilds and restarts it with backoff
// when it fails, and logs the recovery of its table partitions.
type role struct {
	name, table string
	log         *slog.Logger
	build       func() (*goka.Processor, error)
	cur         atomic.Pointer[goka.Processor]
	ready       chan struct{} // closed when the first processor is ready
	readyOnce   sync.Once
}

const (
	minBackoff      = time.Second
	maxBackoff      = 30 * time.Second
	progressEvery   = 2 * time.Second
	healthyRunReset = 2 * time.Minute
)

func newRole(name, table string, log *slog.Logger, build func() (*goka.Processor, error)) *role {
	return &role{name: name, table: table, log: log.With("role", name), build: build, ready: make(chan struct{})}
}

// get looks a key up in the current processor's table (owned partitions).
func (r *role) get(key string) (any, error) {
	p := r.cur.Load()
	if p == nil {
		return nil, errors.New("not running")
	}
	return p.Get(key)
}

// supervise runs p, then rebuilt processors, until ctx ends.
func (r *role) supervise(ctx context.Context, p *goka.Processor) error {
	backoff := minBackoff
	for {
		var err error
		if p != nil {
			r.cur.Store(p)
			began := time.Now()
			err = r.runOnce(ctx, p)
			if ctx.Err() != nil {
				return nil
			}
			if time.Since(began) > healthyRunReset {
				backoff = minBackoff
			}
			if err == nil {
				err = errors.New("processor stopped on its own")
			}
		}
		r.log.Error("processor failed; restarting", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
		if p, err = r.build(); err != nil {
			p = nil
			r.log.Error("rebuild processor", "err", err)
		}
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
		if p.WaitForReadyContext(ctx) == nil && ctx.Err() == nil {
			close(ready)
		}
	}()
	t := time.NewTicker(progressEvery)
	defer t.Stop()
	last := map[int32]int64{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-ready:
			r.log.Info("processor running", "partitions", len(p.Stats().Group))
			r.readyOnce.Do(func() { close(r.ready) })
			return
		case <-t.C:
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
