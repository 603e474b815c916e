package dueindex

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkIndexMemory holds a partition's share of 10 M pending follow-ups
// (1.25 M on 8 partitions, two per user) in a due index and reports the
// heap it takes per pending follow-up and how long a full garbage
// collection takes with it live: the collector's work per cycle.
func BenchmarkIndexMemory(b *testing.B) {
	const users, perUser = 625000, 2
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		x := NewIndex(nil)
		for u := range users {
			v := &Value{}
			for k := range perUser {
				v.Pending = append(v.Pending, Task{Due: t0.Add(time.Duration(u*perUser+k) * time.Millisecond).UnixNano(), ID: fmt.Sprint("task-", k)})
			}
			x.Update(fmt.Sprint("user-", u), nil, v)
		}
		b.StopTimer()
		start := time.Now()
		runtime.GC()
		gc := time.Since(start)
		runtime.ReadMemStats(&after)
		n := x.Len()
		runtime.KeepAlive(x)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "heap-B/pending")
		b.ReportMetric(float64(gc.Microseconds())/1000, "gc-ms")
		b.StartTimer()
	}
}
