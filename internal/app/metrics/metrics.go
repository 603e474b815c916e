// Package metrics defines ivrsched's Prometheus metrics: the histograms the
// firing and dialing paths observe, and collectors that read everything
// else (counters the processors keep anyway, the due indexes' backlog,
// restore progress) when /metrics is scraped, so that a fire pays for one
// histogram observation and nothing more.
//
// Names follow the conventions of delayed-job schedulers (asynq's
// x/metrics, Temporal's schedule metrics) and Prometheus's: the ivrsched_
// prefix, base units (seconds), _total on counters. No label carries a
// user, call or campaign id: labels are partitions, roles, dead-letter
// reasons and call outcomes, all closed sets.
//
// Every constructor returns collectors to register in a registry of the
// caller's (the application's, or a test's own), never the global one.
package metrics

import "github.com/prometheus/client_golang/prometheus"

const namespace = "ivrsched"

// LatenessBuckets resolve a follow-up's lateness from 1 ms (the producer's
// flush and the fetch wait) to a minute (a rebalance, a broker restart).
var LatenessBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// ProviderBuckets resolve a provider request from 5 ms to the longest
// --call-timeout worth telling apart.
var ProviderBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// WaitBuckets resolve a wait for a calls-per-second token from nothing
// (a token was there) to ten seconds of backlog.
var WaitBuckets = []float64{.0001, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// FireLateness is the histogram of how late follow-ups fire, from their
// due time to the scheduler's publishing of their calls (the calls'
// fired_at); scheduler.Config.Lateness observes it.
func FireLateness() prometheus.Histogram {
	return histogram("fire_lateness_seconds", "How late follow-ups fired: from their due time (effective, after the calling policy) to the publishing of their calls.", LatenessBuckets)
}

// ProviderLatency is the histogram of provider requests' durations;
// placement.Config.Latency observes it.
func ProviderLatency() prometheus.Histogram {
	return histogram("provider_request_duration_seconds", "Duration of the dialer's requests to the call provider, answered or not (retries are requests of their own).", ProviderBuckets)
}

// RateLimitWait is the histogram of the dialer's waits for a token of the
// calls-per-second bucket (--cps); placement.Config.RateWait observes it.
func RateLimitWait() prometheus.Histogram {
	return histogram("dialer_rate_limit_wait_seconds", "How long each provider request waited for a token of the calls-per-second limit (--cps).", WaitBuckets)
}

func histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets})
}

// collector is a prometheus.Collector whose metrics are made by collect
// at scrape time from descs.
type collector struct {
	descs   []*prometheus.Desc
	collect func(ch chan<- prometheus.Metric)
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

// newDesc is a metric's description in ivrsched's namespace.
func newDesc(name, help string, constLabels prometheus.Labels, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, constLabels)
}

// counter is a counter read from an atomic the processor keeps.
type counter struct {
	desc *prometheus.Desc
	read func() int64
}

func collectCounters(ch chan<- prometheus.Metric, cs []counter) {
	for _, c := range cs {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.read()))
	}
}

func counterDescs(cs []counter) []*prometheus.Desc {
	out := make([]*prometheus.Desc, len(cs))
	for i, c := range cs {
		out[i] = c.desc
	}
	return out
}
