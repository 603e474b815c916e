package app

import (
	"context"
	"fmt"
	"time"

	"github.com/gorilla/mux"
	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ivrsched/ivrsched/internal/app/metrics"
)

// registry is where Run registers the roles' metrics: the configured one,
// or a registry of this Run's own.
func (c Config) registry() *prometheus.Registry {
	if c.Metrics != nil {
		return c.Metrics
	}
	return prometheus.NewRegistry()
}

// register registers collectors in reg.
func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// mountMetrics serves reg on /metrics, in Prometheus's text format (or
// OpenMetrics, when the scraper asks for it).
func mountMetrics(router *mux.Router, reg *prometheus.Registry) {
	router.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
}

// statsTimeout bounds a scrape's wait for a processor's statistics.
const statsTimeout = time.Second

// restoreProgress reports each role's restore progress: the records its
// local stores restored, and from its current processor's statistics the
// partitions not running yet (restoring, as /readyz says) and the
// changelog records those that restore have left.
func restoreProgress(roles []*role) func() []metrics.Restore {
	return func() []metrics.Restore {
		out := make([]metrics.Restore, 0, len(roles))
		for _, ro := range roles {
			r := metrics.Restore{Role: ro.name}
			if ro.stores != nil {
				r.Restored = ro.stores.Restored()
			}
			if p := ro.cur.Load(); p != nil {
				ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
				for _, ps := range p.StatsWithContext(ctx).Group {
					ts := ps.TableStats
					if ts == nil || ts.Status == goka.PartitionRunning {
						continue
					}
					r.Restoring++
					if ts.Status == goka.PartitionRecovering && ts.Recovery != nil {
						r.Remaining += max(ts.Recovery.Hwm-ts.Recovery.Offset-1, 0)
					}
				}
				cancel()
			}
			out = append(out, r)
		}
		return out
	}
}
