package app

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
)

// The owned due indexes' follow-ups count per hour at their due time (the
// effective one), by the campaign their user's value gives; one due before
// the first hour counts in it, one after the last hour is not counted.
func TestUpcomingHoursCountsTheDueIndexes(t *testing.T) {
	from := time.Date(2026, 12, 3, 14, 20, 0, 0, time.UTC)
	at := func(h, m int) int64 { return time.Date(2026, 12, 3, h, m, 0, 0, time.UTC).UnixNano() }
	x0, x2 := dueindex.NewIndex(nil), dueindex.NewIndex(nil)
	x0.Update("u1", nil, &dueindex.Value{Pending: []dueindex.Task{{Due: at(14, 5), ID: "late"}, {Due: at(15, 0), ID: "a"}}})
	x0.Update("u2", nil, &dueindex.Value{Pending: []dueindex.Task{{Due: at(15, 59), ID: "a"}, {Due: at(17, 0), ID: "after"}}})
	x2.Update("u3", nil, &dueindex.Value{Pending: []dueindex.Task{{Due: at(16, 30), ID: "a"}}})
	values := map[string]*pb.UserState{
		"u1": {Pending: []*pb.Task{{TaskId: "late", Action: &pb.Action{CampaignId: "spring"}}, {TaskId: "a", Action: &pb.Action{CampaignId: "spring"}}}},
		"u2": {Pending: []*pb.Task{{TaskId: "a", Action: &pb.Action{CampaignId: "promo"}}}},
	}
	get := func(user string) (any, error) {
		if v, ok := values[user]; ok {
			return v, nil
		}
		return nil, errors.New("not owned here")
	}
	index := func(p int32) *dueindex.Index { return map[int32]*dueindex.Index{0: x0, 2: x2}[p] }
	h, err := upcomingHours(index, 4, get, from, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Partitions) != 2 || h.Partitions[0] != 0 || h.Partitions[1] != 2 || !h.Start.Equal(from.Truncate(time.Hour)) || h.Truncated {
		t.Fatalf("answer %+v", h)
	}
	want := []admin.HourCount{
		{Total: 1, Campaigns: map[string]int{"spring": 1}},
		{Total: 2, Campaigns: map[string]int{"spring": 1, "promo": 1}},
		{Total: 1, Campaigns: map[string]int{admin.Unread: 1}},
	}
	for i, w := range want {
		got := h.Hours[i]
		if got.Total != w.Total || len(got.Campaigns) != len(w.Campaigns) {
			t.Fatalf("hour %d: %+v, want %+v", i, got, w)
		}
		for c, n := range w.Campaigns {
			if got.Campaigns[c] != n {
				t.Errorf("hour %d, campaign %s: %d, want %d", i, c, got.Campaigns[c], n)
			}
		}
	}
}

// The page's chart data are fetched at most once per chartsEvery; an
// error is not kept.
func TestChartsAreCached(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC))
	fetches, fail := 0, false
	get := cached(Config{Clock: clk}, func(context.Context) (int, error) {
		fetches++
		if fail {
			return 0, errors.New("no instance")
		}
		return fetches, nil
	})
	ctx := context.Background()
	for _, step := range []struct {
		advance time.Duration
		fail    bool
		want    int
		err     bool
	}{
		{0, false, 1, false},
		{chartsEvery - time.Second, false, 1, false},
		{time.Second, true, 0, true}, // stale: fetched again, and failed
		{0, false, 3, false},         // the error was not kept
	} {
		clk.Advance(step.advance)
		fail = step.fail
		got, err := get(ctx)
		if got != step.want || (err != nil) != step.err {
			t.Fatalf("after %v: %d, %v; want %d (error %v)", step.advance, got, err, step.want, step.err)
		}
	}
}

// A held follow-up (a timer: the mark passed it on another clock) counts
// in the hour it is due in, by campaign, and as held; a parked one (due,
// waiting for its user's callback to move it under the policy in force)
// counts in no hour but as parked, so that the hours and Parked add up to
// what is pending. The admin API's JSON names both.
func TestUpcomingHoursCountsHeldAndParked(t *testing.T) {
	from := time.Date(2026, 12, 3, 14, 20, 0, 0, time.UTC)
	at := func(h, m int) int64 { return time.Date(2026, 12, 3, h, m, 0, 0, time.UTC).UnixNano() }
	x := dueindex.NewIndex(nil)
	x.Update("tick", nil, &dueindex.Value{Mark: &dueindex.Mark{Through: dueindex.Pos{Due: at(14, 10), User: "z", Task: "t"}}})
	x.Update("held", nil, &dueindex.Value{Pending: []dueindex.Task{{Due: at(14, 5), ID: "h", Held: true}}})
	x.Update("later", nil, &dueindex.Value{Pending: []dueindex.Task{{Due: at(15, 30), ID: "h", Held: true}}})
	x.Update("parked", nil, &dueindex.Value{Pending: []dueindex.Task{{Due: at(14, 15), ID: "p"}}})
	x.Update("ready", nil, &dueindex.Value{Pending: []dueindex.Task{{Due: at(16, 0), ID: "r"}}})
	due := x.TakeDue(time.Unix(0, at(14, 20)), 0)
	if len(due) != 1 || due[0].User != "parked" {
		t.Fatalf("due %v", due)
	}
	x.Park(due[0])
	values := map[string]*pb.UserState{
		"held":  {Pending: []*pb.Task{{TaskId: "h", Held: true, Action: &pb.Action{CampaignId: "spring"}}}},
		"later": {Pending: []*pb.Task{{TaskId: "h", Held: true, Action: &pb.Action{CampaignId: "spring"}}}},
	}
	get := func(user string) (any, error) {
		if v, ok := values[user]; ok {
			return v, nil
		}
		return nil, errors.New("not owned here")
	}
	h, err := upcomingHours(func(p int32) *dueindex.Index { return map[int32]*dueindex.Index{0: x}[p] }, 1, get, from, 3)
	if err != nil {
		t.Fatal(err)
	}
	if h.Held != 2 || h.Parked != 1 {
		t.Fatalf("held %d, parked %d; want 2 and 1", h.Held, h.Parked)
	}
	for i, w := range []map[string]int{{"spring": 1}, {"spring": 1}, {admin.Unread: 1}} {
		got := h.Hours[i]
		if got.Total != 1 || len(got.Campaigns) != 1 {
			t.Fatalf("hour %d: %+v, want %v", i, got, w)
		}
		for c, n := range w {
			if got.Campaigns[c] != n {
				t.Errorf("hour %d: %+v, want %v", i, got, w)
			}
		}
	}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"held":2`) || !strings.Contains(string(b), `"parked":1`) {
		t.Errorf("JSON %s lacks held and parked", b)
	}
}
