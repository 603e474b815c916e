package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The restore collector reports what its progress function says, per role,
// at each gather.
func TestRestores(t *testing.T) {
	progress := []Restore{{Role: "scheduler", Restored: 1500, Restoring: 2, Remaining: 300}, {Role: "dialer"}}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(Restores(func() []Restore { return progress }))
	gather := func() map[string]float64 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				out[f.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		return out
	}
	want := map[string]float64{
		"ivrsched_restore_records_total/scheduler": 1500, "ivrsched_restore_remaining_records/scheduler": 300, "ivrsched_restore_partitions/scheduler": 2,
		"ivrsched_restore_records_total/dialer": 0, "ivrsched_restore_remaining_records/dialer": 0, "ivrsched_restore_partitions/dialer": 0,
	}
	check := func(want map[string]float64) {
		t.Helper()
		got := gather()
		if len(got) != len(want) {
			t.Fatalf("gathered %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %v, want %v", k, got[k], v)
			}
		}
	}
	check(want)
	progress[0] = Restore{Role: "scheduler", Restored: 1800}
	want["ivrsched_restore_records_total/scheduler"], want["ivrsched_restore_remaining_records/scheduler"], want["ivrsched_restore_partitions/scheduler"] = 1800, 0, 0
	check(want)
}
