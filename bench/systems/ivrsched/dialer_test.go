package ivrsched

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
)

// Every latency runs once per repetition, first in turn.
func TestDialerRunsRotate(t *testing.T) {
	lats := []time.Duration{0, 50 * time.Millisecond, 300 * time.Millisecond}
	got := dialerRuns(lats, 3)
	want := []dialerRun{{0, 1}, {1, 1}, {2, 1}, {1, 2}, {2, 2}, {0, 2}, {2, 3}, {0, 3}, {1, 3}}
	if !slices.Equal(got, want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
	if got := dialerRuns(lats, 0); len(got) != 3 || got[0] != (dialerRun{0, 1}) {
		t.Fatalf("no -repeat: runs %v, want each latency once", got)
	}
}

// The table has a row per latency, in the order given, with the median
// and min–max of its runs; a failed run is counted, its error kept in one
// cell, and left out of the figures.
func TestDialerMarkdownMedians(t *testing.T) {
	rs := []DialerResult{
		{LatencyMs: 0, Repetition: 1, Calls: 100, Placed: 100, PlacedPerSec: 5000, P99Ms: 30, Requests: 100, CPUPer1000: 0.1},
		{LatencyMs: 300, Repetition: 1, Calls: 100, Placed: 100, PlacedPerSec: 1600, P99Ms: 900, Requests: 100, CPUPer1000: 0.2},
		{LatencyMs: 300, Repetition: 2, Calls: 100, Error: "warm-up call: timeout; the dialer's log ends:\nbroker | down"},
		{LatencyMs: 0, Repetition: 2, Calls: 100, Placed: 100, PlacedPerSec: 9000, P99Ms: 20, Requests: 100, CPUPer1000: 0.1},
		{LatencyMs: 0, Repetition: 3, Calls: 100, Placed: 100, PlacedPerSec: 6000, P99Ms: 25, Requests: 100, CPUPer1000: 0.1},
	}
	var b bytes.Buffer
	DialerMarkdown(&b, rs)
	var rows []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "| 0 ") || strings.HasPrefix(l, "| 300 ") {
			rows = append(rows, l)
		}
	}
	want := []string{
		"| 0 | 3 | 100 | 100 | 6000 (5000–9000) | 0 | 25 (20–30) | 0 | 100 | 0.10 | 0.00 | 0.00 |",
		"| 300 | 2 (1 failed: warm-up call: timeout; the dialer's log ends: broker / down) | 100 | 100 | 1600 | 0 | 900 | 0 | 100 | 0.20 | 0.00 | 0.00 |",
	}
	if !slices.Equal(rows, want) {
		t.Fatalf("rows\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
}
