package admin

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
)

// Follow-ups count in the hour they are due in, from the hour from falls
// in; one due before counts in the first hour, one after the last is not
// counted; past MaxCampaigns campaigns an hour, the rest are "(other)".
func TestHourCounter(t *testing.T) {
	from := time.Date(2026, 12, 3, 14, 25, 0, 0, time.UTC)
	c := NewHourCounter(from, 3)
	if got := c.End(); !got.Equal(time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC)) {
		t.Fatalf("end %v", got)
	}
	for _, f := range []struct {
		due      time.Time
		campaign string
		counted  bool
	}{
		{from.Add(-2 * time.Hour), "late", true}, // overdue: the first hour
		{from, "a", true},
		{time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC), "a", true},
		{time.Date(2026, 12, 3, 16, 59, 59, 0, time.UTC), "", true},
		{time.Date(2026, 12, 3, 17, 0, 0, 0, time.UTC), "a", false},
	} {
		if got := c.Count(f.due, f.campaign, 1); got != f.counted {
			t.Errorf("count at %v: %v, want %v", f.due, got, f.counted)
		}
	}
	for i := range MaxCampaigns + 3 {
		c.Count(from, fmt.Sprintf("c%02d", i), 1)
	}
	start, hours := c.Hours()
	if !start.Equal(time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)) || len(hours) != 3 {
		t.Fatalf("start %v, %d hours", start, len(hours))
	}
	if h := hours[0]; h.Total != 2+MaxCampaigns+3 || len(h.Campaigns) != MaxCampaigns+1 || h.Campaigns["late"] != 1 || h.Campaigns[OtherCampaigns] != 5 {
		t.Errorf("first hour %+v", h)
	}
	if h := hours[1]; h.Total != 1 || h.Campaigns["a"] != 1 {
		t.Errorf("second hour %+v", h)
	}
	if h := hours[2]; h.Total != 1 || h.Campaigns[NoCampaign] != 1 {
		t.Errorf("third hour %+v", h)
	}
}

// Merging adds the instances' hours and keeps the campaigns with the most
// follow-ups by name.
func TestMergeHours(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	a := []HourCount{{Start: t0, Total: 3, Campaigns: map[string]int{"x": 3}}, {Start: t0.Add(time.Hour), Campaigns: map[string]int{}}}
	b := []HourCount{{Start: t0, Total: 1, Campaigns: map[string]int{"y": 1}}, {Start: t0.Add(time.Hour), Total: 2, Campaigns: map[string]int{"x": 2}}}
	got := MergeHours(a, b)
	if got[0].Total != 4 || got[0].Campaigns["x"] != 3 || got[0].Campaigns["y"] != 1 || got[1].Total != 2 || got[1].Campaigns["x"] != 2 {
		t.Fatalf("merged %+v", got)
	}
	if cs := Campaigns(got); !slices.Equal(cs, []string{"x", "y"}) {
		t.Fatalf("campaigns %v", cs)
	}
	var many []HourCount
	for i := range 2 * MaxCampaigns {
		many = MergeHours(many, []HourCount{{Start: t0, Total: i + 1, Campaigns: map[string]int{fmt.Sprintf("c%02d", i): i + 1}}})
	}
	total := 0
	for _, n := range many[0].Campaigns {
		total += n
	}
	if len(many[0].Campaigns) != MaxCampaigns+1 || many[0].Campaigns["c15"] != 16 || many[0].Campaigns["c00"] != 0 || total != many[0].Total {
		t.Fatalf("campaigns after merging %d: %v (total %d of %d)", 2*MaxCampaigns, many[0].Campaigns, total, many[0].Total)
	}
}

// An hour leaves for the next what the capacity does not place.
func TestBacklog(t *testing.T) {
	if got := Backlog([]int{10, 50, 10, 0, 40}, 30); !slices.Equal(got, []float64{0, 20, 0, 0, 10}) {
		t.Fatalf("backlog %v", got)
	}
	if got := Backlog([]int{10, 5000}, 0); !slices.Equal(got, []float64{0, 0}) {
		t.Fatalf("no limit: %v", got)
	}
}

// Quantiles are the upper bounds of the buckets they fall in.
func TestQuantile(t *testing.T) {
	b := make([]uint64, len(LatenessBounds))
	if Quantile(b, 0.5) != 0 {
		t.Fatal("quantile of nothing")
	}
	i2ms := slices.IndexFunc(LatenessBounds, func(v float64) bool { return v >= 0.002 })
	i1s := slices.IndexFunc(LatenessBounds, func(v float64) bool { return v >= 1 })
	b[i2ms], b[i1s] = 98, 2
	if got := Quantile(b, 0.5); got != LatenessBounds[i2ms] || got < 0.002 || got > 0.0025 {
		t.Errorf("p50 %v", got)
	}
	if got := Quantile(b, 0.99); got != LatenessBounds[i1s] {
		t.Errorf("p99 %v, want %v", got, LatenessBounds[i1s])
	}
	b[len(b)-1] = 1000 // above every bound
	if got := Quantile(b, 0.99); got != LatenessBounds[len(LatenessBounds)-2] {
		t.Errorf("p99 in the open bucket: %v", got)
	}
	for i := 1; i < len(LatenessBounds)-1; i++ {
		if r := LatenessBounds[i] / LatenessBounds[i-1]; r > 1.26 || r < 1.2 {
			t.Fatalf("bounds %v and %v: ratio %v", LatenessBounds[i-1], LatenessBounds[i], r)
		}
	}
	if !math.IsInf(LatenessBounds[len(LatenessBounds)-1], 1) || LatenessBounds[len(LatenessBounds)-2] < 60 {
		t.Fatalf("the bounds end at %v", LatenessBounds[len(LatenessBounds)-2:])
	}
}

// The recorder keeps each minute of the last hour apart; an hour later a
// minute's slot holds the new minute only.
func TestLatenessRecorder(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 14, 0, 30, 0, time.UTC)
	clk := clock.NewFake(t0)
	r := NewLatenessRecorder(clk)
	for range 99 {
		r.Observe(0.003)
	}
	r.Observe(2)
	clk.Advance(time.Minute)
	r.Observe(0.0001)
	s := r.Series()
	if len(s.Minutes) != 60 {
		t.Fatalf("%d minutes", len(s.Minutes))
	}
	last, prev := s.Minutes[59], s.Minutes[58]
	if !prev.Minute.Equal(t0.Truncate(time.Minute)) || prev.Count != 100 || prev.P50 < 0.003 || prev.P50 > 0.004 || prev.P99 < 0.003 || prev.P99 > 0.004 {
		t.Errorf("minute with 100 fires: %+v", prev)
	}
	if last.Count != 1 || last.P50 != LatenessBounds[0] {
		t.Errorf("last minute: %+v", last)
	}
	if got := MergeLateness(s.Minutes, s.Minutes); len(got) != 60 || got[58].Count != 200 || got[58].P99 != prev.P99 || got[58].Buckets != nil {
		t.Errorf("merged twice: %+v", got[58])
	}
	clk.Advance(61 * time.Minute) // the slot of t0's minute again
	r.Observe(0.5)
	s = r.Series()
	var total uint64
	for _, m := range s.Minutes {
		total += m.Count
	}
	if total != 1 || s.Minutes[59].Count != 1 || s.Minutes[59].P50 < 0.5 || s.Minutes[59].P50 > 0.63 {
		t.Fatalf("an hour later: %d fires, last minute %+v", total, s.Minutes[59])
	}
}

func result(outcome pb.Outcome, final bool, at time.Time, zone string) *pb.CallResult {
	return &pb.CallResult{Outcome: outcome, Final: final, At: timestamppb.New(at), RecipientZone: zone}
}

// Final results count by the recipient's local hour over the last 7 days;
// without a known zone they count apart; others are not counted.
func TestAnswerCounter(t *testing.T) {
	now := time.Date(2026, 12, 3, 14, 30, 0, 0, time.UTC)
	var c AnswerCounter
	at := time.Date(2026, 12, 3, 14, 10, 0, 0, time.UTC) // 09:10 in New York, 15:10 in Berlin
	for _, r := range []struct {
		res     *pb.CallResult
		counted bool
	}{
		{result(pb.Outcome_OUTCOME_ANSWERED, true, at, "America/New_York"), true},
		{result(pb.Outcome_OUTCOME_NO_ANSWER, true, at, "America/New_York"), true},
		{result(pb.Outcome_OUTCOME_BUSY, true, at, "Europe/Berlin"), true},
		{result(pb.Outcome_OUTCOME_FAILED, true, at.Add(-6*24*time.Hour), "Europe/Berlin"), true},
		{result(pb.Outcome_OUTCOME_MACHINE, true, at, "Europe/Berlin"), true},
		{result(pb.Outcome_OUTCOME_ANSWERED, true, at, ""), true},             // unknown zone
		{result(pb.Outcome_OUTCOME_ANSWERED, true, at, "Mars/Olympus"), true}, // unknown zone
		{result(pb.Outcome_OUTCOME_RINGING, false, at, "Europe/Berlin"), false},
		{result(pb.Outcome_OUTCOME_ANSWERED, false, at, "Europe/Berlin"), false},
		{result(pb.Outcome_OUTCOME_SUPPRESSED, true, at, "Europe/Berlin"), false},
		{result(pb.Outcome_OUTCOME_ANSWERED, true, at.Add(-8*24*time.Hour), "Europe/Berlin"), false},
		{result(pb.Outcome_OUTCOME_ANSWERED, true, at.Add(3*time.Hour), "Europe/Berlin"), false},
	} {
		if got := c.Add(r.res, now); got != r.counted {
			t.Errorf("%v: counted %v, want %v", r.res, got, r.counted)
		}
	}
	a := c.Rates(now)
	if len(a.Hours) != 24 || a.UnknownZone != 2 || !a.Since.Equal(time.Date(2026, 11, 26, 15, 0, 0, 0, time.UTC)) {
		t.Fatalf("rates: %d hours, %d unknown, since %v", len(a.Hours), a.UnknownZone, a.Since)
	}
	if h := a.Hours[9]; h.Answered != 1 || h.NoAnswer != 1 || h.Total() != 2 {
		t.Errorf("09:00: %+v", h)
	}
	if h := a.Hours[15]; h.Busy != 1 || h.Failed != 1 || h.Other != 1 || h.Total() != 3 {
		t.Errorf("15:00: %+v", h)
	}
	// Two days on, the result of 6 days before has left the window and
	// today's have not; eight days on, only the newest is left.
	later := now.Add(2 * 24 * time.Hour)
	c.Add(result(pb.Outcome_OUTCOME_ANSWERED, true, later, "Europe/Berlin"), later)
	a = c.Rates(later)
	if h := a.Hours[15]; h.Failed != 0 || h.Busy != 1 || h.Answered != 1 {
		t.Errorf("two days later, 15:00: %+v", h)
	}
	a = c.Rates(now.Add(8 * 24 * time.Hour))
	for _, h := range a.Hours {
		if h.Total() != 0 && h.Hour != 15 {
			t.Errorf("8 days later: %+v", h)
		}
	}
}

func callResult(id string, outcome pb.Outcome, at time.Time) *pb.CallResult {
	r := result(outcome, true, at, "Europe/Berlin")
	r.CallId = id
	return r
}

// The dialer publishes a call's final result again when it replays its
// statuses after a restart: the repeat does not count; another call with
// the same outcome at the same time does.
func TestAnswerCounterRepublished(t *testing.T) {
	now := time.Date(2026, 12, 3, 14, 30, 0, 0, time.UTC)
	at := now.Add(-20 * time.Minute) // 15:10 in Berlin
	var c AnswerCounter
	first := callResult("c1", pb.Outcome_OUTCOME_ANSWERED, at)
	if !c.Add(first, now) {
		t.Fatal("the first result of c1 did not count")
	}
	if c.Add(proto.Clone(first).(*pb.CallResult), now) {
		t.Error("c1's republished result counted again")
	}
	if !c.Add(callResult("c2", pb.Outcome_OUTCOME_ANSWERED, at), now) {
		t.Error("c2 did not count")
	}
	if h := c.Rates(now).Hours[15]; h.Answered != 2 {
		t.Errorf("15:00: %+v, want 2 answered", h)
	}
}

// The memory of counted ids is a fixed table inside the counter (no map
// that grows with the calls counted): none of many distinct calls is taken for a repeat, a
// repeat right behind its first is recognized after any number of calls,
// and one far behind (more calls in between than the table holds) is
// forgotten and counts again.
func TestAnswerCounterMemoryBound(t *testing.T) {
	if n := unsafe.Sizeof(AnswerCounter{}); n > 300<<10 {
		t.Errorf("AnswerCounter is %d bytes, want at most 300 KiB", n)
	}
	now := time.Date(2026, 12, 3, 14, 30, 0, 0, time.UTC)
	at := now.Add(-time.Minute)
	var c AnswerCounter
	const calls = 16 * recentSets * recentWays
	for i := range calls {
		id := fmt.Sprintf("call-%d", i)
		if !c.Add(callResult(id, pb.Outcome_OUTCOME_BUSY, at), now) {
			t.Fatalf("distinct call %s taken for a repeat", id)
		}
		if i%1000 == 0 && c.Add(callResult(id, pb.Outcome_OUTCOME_BUSY, at), now) {
			t.Fatalf("the repeat of %s counted", id)
		}
	}
	if !c.Add(callResult("call-0", pb.Outcome_OUTCOME_BUSY, at), now) {
		t.Errorf("a repeat %d calls later was remembered: the table holds %d", calls, recentSets*recentWays)
	}
	var total uint64
	for _, h := range c.Rates(now).Hours {
		total += h.Busy
	}
	if total != calls+1 {
		t.Errorf("%d counted, want %d", total, calls+1)
	}
}
