package metrics

import "github.com/prometheus/client_golang/prometheus"

// Restore is a role's restore progress: its table partitions restored from
// their changelogs into the local stores.
type Restore struct {
	Role string
	// Restored is the changelog records restored since the process started.
	Restored int64
	// Restoring is the partitions restoring now, and Remaining the records
	// they have left to restore.
	Restoring int
	Remaining int64
}

// Restores returns the collector of the restore progress of every role
// progress reports, read at scrape time.
func Restores(progress func() []Restore) prometheus.Collector {
	restored := newDesc("restore_records_total", "Changelog records restored into the role's local table stores since the process started.", nil, "role")
	remaining := newDesc("restore_remaining_records", "Changelog records the role's partitions restoring now have left to restore.", nil, "role")
	restoring := newDesc("restore_partitions", "The role's table partitions restoring from their changelogs now.", nil, "role")
	return &collector{descs: []*prometheus.Desc{restored, remaining, restoring}, collect: func(ch chan<- prometheus.Metric) {
		for _, r := range progress() {
			ch <- prometheus.MustNewConstMetric(restored, prometheus.CounterValue, float64(r.Restored), r.Role)
			ch <- prometheus.MustNewConstMetric(remaining, prometheus.GaugeValue, float64(r.Remaining), r.Role)
			ch <- prometheus.MustNewConstMetric(restoring, prometheus.GaugeValue, float64(r.Restoring), r.Role)
		}
	}}
}
