package systemtest

import (
	"net/http"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// checkMetrics scrapes /metrics on web after every follow-up of a run
// without crashes fired: the fired counter and the lateness histogram's
// count are the follow-ups fired, the pending gauge (one series per
// partition) is 0, and the dialer's provider latency is there.
func checkMetrics(t *testing.T, web string, parts, fired int) {
	t.Helper()
	resp, err := http.Get("http://" + web + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	one := func(name string) *dto.Metric {
		t.Helper()
		ms := fams[name].GetMetric()
		if len(ms) != 1 {
			t.Fatalf("/metrics: %d series of %s, want 1", len(ms), name)
		}
		return ms[0]
	}
	if got := one("ivrsched_followups_fired_total").GetCounter().GetValue(); got != float64(fired) {
		t.Errorf("ivrsched_followups_fired_total = %v, want %d", got, fired)
	}
	late := one("ivrsched_fire_lateness_seconds").GetHistogram()
	if late.GetSampleCount() != uint64(fired) {
		t.Errorf("ivrsched_fire_lateness_seconds count = %d, want %d", late.GetSampleCount(), fired)
	}
	pending := fams["ivrsched_followups_pending"].GetMetric()
	if len(pending) != parts {
		t.Errorf("ivrsched_followups_pending: %d series, want one per partition (%d)", len(pending), parts)
	}
	for _, m := range pending {
		if v := m.GetGauge().GetValue(); v != 0 {
			t.Errorf("ivrsched_followups_pending%v = %v after every follow-up fired, want 0", m.GetLabel(), v)
		}
	}
	if n := one("ivrsched_provider_request_duration_seconds").GetHistogram().GetSampleCount(); n < uint64(fired) {
		t.Errorf("ivrsched_provider_request_duration_seconds count = %d, want at least %d", n, fired)
	}
	if fams["go_goroutines"] == nil || fams["process_resident_memory_bytes"] == nil {
		t.Error("/metrics lacks the Go runtime's and the process's metrics")
	}
	t.Logf("/metrics: %d follow-ups fired, lateness mean %.1f ms", fired, 1000*late.GetSampleSum()/float64(max(fired, 1)))
}
