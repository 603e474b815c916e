package metrics

import "testing"

// BenchmarkFireLateness is what the lateness histogram adds to a fire:
// one observation, from one partition goroutine (serial) or from every
// one at once (parallel: they share the histogram's counters).
func BenchmarkFireLateness(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		h := FireLateness()
		v := 0.0
		for b.Loop() {
			h.Observe(v)
			v += 0.0001
		}
	})
	b.Run("parallel", func(b *testing.B) {
		h := FireLateness()
		b.RunParallel(func(pb *testing.PB) {
			v := 0.0
			for pb.Next() {
				h.Observe(v)
				v += 0.0001
			}
		})
	})
}
