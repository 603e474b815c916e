package kafkaclient

import (
	metrics "github.com/rcrowley/go-metrics"
)

// noMetrics is the go-metrics registry of every Sarama client ivrsched
// builds: it hands Sarama meters, counters and histograms that keep
// nothing. Sarama updates its metrics on every request (rates, sizes,
// latencies in exponentially decaying samples, per broker and topic), and
// nothing reads them: ivrsched's metrics are its own (internal/app/metrics).
// At 1,250 follow-ups a second they were 8 % of `ivrsched run`'s CPU
// (docs/bench/journal/2026-12-03-cpu-records.md). A kind of metric Sarama
// asks for that is not known here is kept, in a registry of its own.
//
// It does what go-metrics' global UseNilMetrics does, for these clients
// only, without changing a global of the library.
type noMetrics struct {
	metrics.Registry // what is not known here
}

func newNoMetrics() metrics.Registry { return noMetrics{metrics.NewRegistry()} }

// GetOrRegister returns a metric that keeps nothing for the constructors
// Sarama passes (metrics.NewMeter, metrics.NewCounter, its histograms').
func (r noMetrics) GetOrRegister(name string, m any) any {
	switch m.(type) {
	case func() metrics.Meter, metrics.Meter:
		return metrics.NilMeter{}
	case func() metrics.Counter, metrics.Counter:
		return metrics.NilCounter{}
	case func() metrics.Histogram, metrics.Histogram:
		return metrics.NilHistogram{}
	}
	return r.Registry.GetOrRegister(name, m)
}
