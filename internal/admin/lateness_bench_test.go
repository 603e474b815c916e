package admin

import (
	"testing"
	"time"
)

// BenchmarkLatenessRecorder is what the per-minute series adds to a fire
// beside the Prometheus histogram (metrics.BenchmarkFireLateness): one
// observation given the fire's clock reading (ObserveAt, what the
// scheduler calls), from one partition goroutine or from every one at
// once.
func BenchmarkLatenessRecorder(b *testing.B) {
	now := time.Now()
	b.Run("serial", func(b *testing.B) {
		r := NewLatenessRecorder(nil)
		v := 0.0
		for b.Loop() {
			r.ObserveAt(v, now)
			v += 0.0001
		}
	})
	b.Run("parallel", func(b *testing.B) {
		r := NewLatenessRecorder(nil)
		b.RunParallel(func(pb *testing.PB) {
			v := 0.0
			for pb.Next() {
				r.ObserveAt(v, now)
				v += 0.0001
			}
		})
	})
}
