package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/admin"
)

// upcoming --histogram's flag errors name the flag and what it takes.
func TestHistogramFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"upcoming", "--histogram", "--hours", "0"}, "--hours: 0; want 1 to 168"},
		{[]string{"upcoming", "--histogram", "--hours", "169"}, "--hours: 169; want 1 to 168"},
		{[]string{"upcoming", "--histogram", "--campaign", "spring"}, "--histogram: counts every campaign"},
		{[]string{"upcoming", "--histogram", "--to", "2026-12-04T00:00:00Z"}, "--campaign and --to are not taken"},
	} {
		var out, errb bytes.Buffer
		code := realMain(context.Background(), c.args, &out, &errb)
		if msg := errb.String(); code != 2 || !strings.Contains(msg, c.want) || strings.Count(msg, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line containing %q", c.args, code, msg, c.want)
		}
	}
}

// The table has the capacity, a line an hour with its total, the calls
// left for later at that capacity, and a column a campaign (most first);
// a campaign's control characters are quoted.
func TestWriteHistogram(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	h := admin.UpcomingHours{Start: t0, CPS: 0.01, PerHour: 36, Dialers: 2, Hours: []admin.HourCount{
		{Start: t0, Total: 50, Campaigns: map[string]int{"spring": 40, "x\x1b[2J": 10}},
		{Start: t0.Add(time.Hour), Total: 30, Campaigns: map[string]int{"spring": 30}},
		{Start: t0.Add(2 * time.Hour), Total: 0, Campaigns: map[string]int{}},
	}}
	var b bytes.Buffer
	writeHistogram(&b, h)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 5 || lines[0] != "# capacity: 36 calls an hour (--cps 0.01; dialer instances: 2)" {
		t.Fatalf("table:\n%s", b.String())
	}
	for i, want := range [][]string{
		{"hour", "(UTC)", "total", "waiting", "after", "spring", `x\x1b[2J`},
		{"2026-12-03T08:00Z", "50", "14", "40", "10"},
		{"2026-12-03T09:00Z", "30", "8", "30", "0"},
		{"2026-12-03T10:00Z", "0", "0", "0", "0"},
	} {
		if got := strings.Fields(lines[i+1]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("line %d: %q, want %q", i+1, got, want)
		}
	}
	if strings.Contains(b.String(), "\x1b") {
		t.Error("a control character reached the terminal")
	}
}

// The header says how many of the follow-ups counted are held and how
// many more are parked (in no hour); with neither it says nothing of them.
func TestWriteHistogramHeldAndParked(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	h := admin.UpcomingHours{Start: t0, Dialers: 1, Held: 2, Parked: 3, Hours: []admin.HourCount{
		{Start: t0, Total: 5, Campaigns: map[string]int{"spring": 5}},
	}}
	var b bytes.Buffer
	writeHistogram(&b, h)
	lines := strings.Split(b.String(), "\n")
	if len(lines) < 3 || lines[1] != "# held: 2 of those counted (a wake fires each at its hour)" ||
		lines[2] != "# parked: 3 more, due and waiting for the calling policy to move them; in no hour" {
		t.Fatalf("table:\n%s", b.String())
	}
	h.Held, h.Parked = 0, 0
	b.Reset()
	writeHistogram(&b, h)
	if strings.Contains(b.String(), "held") || strings.Contains(b.String(), "parked") {
		t.Errorf("with none held or parked:\n%s", b.String())
	}
}
