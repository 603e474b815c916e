package harness

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// backlogs is a Scalable whose backlog is each of its values in turn; a
// negative value is errNotLeader.
type backlogs struct {
	Scalable
	left []int64
}

var errNotLeader = errors.New("not the leader for some partition")

func (b *backlogs) Backlog(context.Context) (int64, error) {
	n := b.left[0]
	if len(b.left) > 1 {
		b.left = b.left[1:]
	}
	if n < 0 {
		return 0, errNotLeader
	}
	return n, nil
}

func TestKeepUpWaitsForTheIntakeAndStopsAtTheBudget(t *testing.T) {
	ctx := context.Background()
	s := &backlogs{left: []int64{MaxBacklog + 700000, MaxBacklog + 1, MaxBacklog}}
	var progress []ScalePoint
	const scheduled = 3000000
	stop, err := keepUp(ctx, s, time.Now(), time.Hour, scheduled, &progress, time.Millisecond, time.Hour)
	if err != nil || stop {
		t.Fatalf("keepUp = %v, %v; want to go on", stop, err)
	}
	if len(s.left) != 1 {
		t.Errorf("asked %d times, want 3 (until the backlog is at most MaxBacklog)", 3-len(s.left)+1)
	}
	// 1.8 M applied, then 2.499999 M, then 2.5 M: one point per million.
	want := []int64{scheduled - MaxBacklog - 700000, scheduled - MaxBacklog - 1}
	if len(progress) != len(want) {
		t.Fatalf("progress %v, want applied %v", progress, want)
	}
	for i, p := range progress {
		if p.Applied != want[i] {
			t.Errorf("progress[%d].Applied = %d, want %d", i, p.Applied, want[i])
		}
	}

	s = &backlogs{left: []int64{MaxBacklog + 1}}
	stop, err = keepUp(ctx, s, time.Now().Add(-time.Hour), time.Hour, scheduled, &progress, time.Millisecond, time.Hour)
	if err != nil || !stop {
		t.Fatalf("keepUp with the budget spent = %v, %v; want to stop", stop, err)
	}
}

func TestKeepUpAsksAgainWhileTheBrokerFails(t *testing.T) {
	ctx := context.Background()
	s := &backlogs{left: []int64{-1, -1, MaxBacklog}}
	var progress []ScalePoint
	stop, err := keepUp(ctx, s, time.Now(), time.Hour, 3000000, &progress, time.Millisecond, time.Hour)
	if err != nil || stop {
		t.Fatalf("keepUp after two failed polls = %v, %v; want to go on", stop, err)
	}
	if len(s.left) != 1 {
		t.Errorf("asked %d times, want 3", 3-len(s.left)+1)
	}

	s = &backlogs{left: []int64{-1}}
	if _, err := keepUp(ctx, s, time.Now(), time.Hour, 3000000, &progress, time.Millisecond, 0); !errors.Is(err, errNotLeader) {
		t.Errorf("keepUp with the patience spent = %v; want the broker's error", err)
	}
}

func TestScaleMarkdownShowsTheFirstFiresAfterTheIntake(t *testing.T) {
	var b strings.Builder
	ScaleMarkdown(&b, []ScaleResult{{System: "sched-scale", Pending: 10000000, Steady: &Phase{P99Ms: 40},
		Prefire: &Phase{Fired: 1990, Missing: 10, P50Ms: 120, P99Ms: 450, MaxMs: 510}}})
	want := "The first 2000 fires after the intake of sched-scale (prefire, left out of its steady figures): p50 / p99 / max 120 / 450 / 510 ms, 10 missing."
	if !strings.Contains(b.String(), want) {
		t.Errorf("ScaleMarkdown wrote\n%s\nwant a line %q", b.String(), want)
	}
}
