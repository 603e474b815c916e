package harness

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want Spread
	}{
		{[]float64{30, 10, 20}, Spread{Median: 20, Min: 10, Max: 30, N: 3}},
		{[]float64{4, 1, 2, 3}, Spread{Median: 2.5, Min: 1, Max: 4, N: 4}},
		{nil, Spread{}},
	} {
		if got := SpreadOf(c.in); got != c.want {
			t.Errorf("SpreadOf(%v) = %+v, want %+v", c.in, got, c.want)
		}
	}
	if got := (Spread{Median: 2, Min: 1, Max: 3, N: 3}).Format("%.0f"); got != "2 (1–3)" {
		t.Errorf("Format = %q", got)
	}
}

// Each repetition's ratio is to the floor of the same repetition, not to
// the floor's median.
func TestSummarizeRatiosPerRepetition(t *testing.T) {
	run := func(sys string, rep int, floor bool, p99, burst float64) Result {
		return Result{System: sys, Repetition: rep, Floor: floor,
			Steady: &Phase{P50Ms: p99 / 2, P99Ms: p99, Fired: 10}, Burst: &Phase{P99Ms: p99, FirePerSec: burst, Fired: 100}}
	}
	rs := []Result{
		run("kafka-floor", 1, true, 10, 100), run("ivrsched-kafka", 1, false, 20, 50),
		run("ivrsched-kafka", 2, false, 90, 50), run("kafka-floor", 2, true, 100, 100),
		run("kafka-floor", 3, true, 4, 200), run("ivrsched-kafka", 3, false, 12, 200),
		{System: "ivrsched-kafka", Repetition: 4, Error: "start: boom"},
	}
	ss := Summarize(rs, []string{"kafka-floor", "ivrsched-kafka"})
	iv := ss[1]
	if want := (Spread{Median: 2, Min: 0.9, Max: 3, N: 3}); iv.SteadyP99Floor != want {
		t.Fatalf("p99 × floor %+v, want %+v", iv.SteadyP99Floor, want)
	}
	if iv.Runs != 4 || iv.Failed != 1 || iv.SteadyP99Ms.Median != 20 {
		t.Fatalf("summary %+v", iv)
	}
	var b bytes.Buffer
	SummaryMarkdown(&b, rs, []string{"kafka-floor", "ivrsched-kafka"}, "ivrsched-kafka")
	if !strings.Contains(b.String(), "| ivrsched-kafka (1 failed) | 4 | 10 (6–45) | 20 (12–90) | 2.00 (0.90–3.00) |") ||
		!strings.Contains(b.String(), "0.50 (0.50–1.00)× kafka-floor's") {
		t.Fatalf("markdown:\n%s", b.String())
	}
	if strings.Contains(b.String(), "First fires") {
		t.Fatalf("a first-fires table without first fires:\n%s", b.String())
	}
}

// The first fires left out of the steady figures are reported apart, with
// those after a restart where measured.
func TestSummaryReportsFirstFires(t *testing.T) {
	run := func(sys string, rep int, pre, again float64) Result {
		r := Result{System: sys, Repetition: rep, Steady: &Phase{P99Ms: 5, Fired: 10}, Burst: &Phase{P99Ms: 5, FirePerSec: 1, Fired: 1},
			Prefire: &Phase{P99Ms: pre}}
		if again > 0 {
			r.AfterRestart = &Phase{P99Ms: again}
		}
		return r
	}
	rs := []Result{run("kafka-floor", 1, 9, 0), run("ivrsched-kafka", 1, 40, 12), run("ivrsched-kafka", 2, 100, 30), run("ivrsched-kafka", 3, 60, 20)}
	var b bytes.Buffer
	SummaryMarkdown(&b, rs, []string{"kafka-floor", "ivrsched-kafka"}, "ivrsched-kafka")
	for _, want := range []string{"| kafka-floor | 9 | - |", "| ivrsched-kafka | 60 (40–100) | 20 (12–30) |"} {
		if !strings.Contains(b.String(), want) {
			t.Fatalf("no %q in:\n%s", want, b.String())
		}
	}
}

// The timeline slices fires by due time, so a stall shows where it is.
func TestTimelineSlicesByDueTime(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	due := []time.Time{t0, t0.Add(100 * ms), t0.Add(200 * ms), t0.Add(260 * ms), t0.Add(900 * ms)}
	got := timeline(t0, due, []float64{5, 7, 300, 4, 6})
	want := []TimelineSlice{
		{AtMs: 0, Fired: 3, P50Ms: 7, P99Ms: 300, MaxMs: 300},
		{AtMs: 250, Fired: 1, P50Ms: 4, P99Ms: 4, MaxMs: 4},
		{AtMs: 750, Fired: 1, P50Ms: 6, P99Ms: 6, MaxMs: 6},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("timeline\n got %+v\nwant %+v", got, want)
	}
}
