package harness

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// The rebalance's probes are split by whether their partition moved to the
// second instance; each side's longest wait is its latest probe, a probe
// not placed is lost, and each side sums the opens of its owner.
func TestSplitRebalance(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := placer{fires: make(chan Fire), placed: make(chan Fire)}
	w := watch(ctx, p, nil)
	t0 := time.Unix(1_800_000_000, 0)
	part := map[string]int32{"u0": 0, "u1": 1, "u2": 2}
	ts := []Task{{ID: "a", User: "u0", Due: t0}, {ID: "b", User: "u1", Due: t0}, {ID: "c", User: "u1", Due: t0.Add(time.Second)}, {ID: "d", User: "u2", Due: t0}}
	w.expect(ts)
	for _, f := range []Fire{{ID: "a", At: t0.Add(300 * time.Millisecond)}, {ID: "b", At: t0.Add(4 * time.Second)}, {ID: "c", At: t0.Add(4 * time.Second)}, {ID: "d", At: t0.Add(time.Second)}} {
		p.fires <- f
		if f.ID != "d" {
			p.placed <- f // d is never placed
		}
	}
	w.wait(ctx, time.Now().Add(200*time.Millisecond))
	opens := []PartitionOpen{
		{Instance: "joiner", Partition: 1, Restored: 100, RestoreSec: 2, Keys: 40, BuildSec: 0.5},
		{Instance: "main", Partition: 0, Restored: -1, Keys: 10, BuildSec: 0.1},
		{Instance: "main", Partition: 2, Restored: 3, RestoreSec: 0.2, Keys: 12, BuildSec: 0.3},
	}
	f := splitRebalance(w, ts, []int32{1}, 3, func(u string) int32 { return part[u] }, opens)
	mv, st := f.Moved, f.Stayed
	if !slices.Equal(mv.Partitions, []int32{1}) || mv.Probes != 2 || mv.LongestWaitSec != 4 || mv.Lost != 0 {
		t.Errorf("moved %+v", mv)
	}
	if !slices.Equal(st.Partitions, []int32{0, 2}) || st.Probes != 2 || st.LongestWaitSec != 1 || st.Lost != 1 {
		t.Errorf("stayed %+v", st)
	}
	if (mv.Opened != Opened{Partitions: 1, Restored: 100, MaxRestoreSec: 2, Keys: 40, MaxBuildSec: 0.5}) {
		t.Errorf("moved opened %+v", mv.Opened)
	}
	if (st.Opened != Opened{Partitions: 2, Restored: 3, MaxRestoreSec: 0.2, Keys: 22, MaxBuildSec: 0.3}) {
		t.Errorf("stayed opened %+v", st.Opened)
	}
}

func TestRetentionMarkdown(t *testing.T) {
	side := func(wait float64) RebalanceSide { return RebalanceSide{LongestWaitSec: wait} }
	r := RetentionResult{System: "s", Idle: 1000, Pending: 100, Retain: "1m0s", Expired: 1000, RetentionSec: 12.5,
		Tombstones: map[string]int64{"b-table": 0, "a-table": 1000}, RestartRatio: 1.5, MovedRatio: 0.9, StayedRatio: 1.1,
		States: []RetentionState{
			{Name: baselineState, Users: 58, Restart: RestartFigures{FirstFireSec: 0.4}, Rebalance: RebalanceFigures{Moved: side(5.2), Stayed: side(5.1)}},
			{Name: beforeState, Error: "a | b"},
			{Name: afterState, Users: 58, Restart: RestartFigures{FirstFireSec: 0.6}, Rebalance: RebalanceFigures{Moved: side(10.4), Stayed: side(5.1)}, VsBaseline: [3]float64{1.5, 2, 1}},
		}}
	var b bytes.Buffer
	RetentionMarkdown(&b, []RetentionResult{r})
	out := b.String()
	for _, want := range []string{
		"| baseline | 58 | 0.4 | 0 / 0 / 0 | 0, 0.0 | 5.2 |",
		"| 0, 0.0 | - |\n",
		"| 0, 0.0 | 1.50× / 2.00× / 1.00× |\n",
		"| before retention | error: a / b |",
		"last 12.5 s after the restart",
		"tombstones: a-table 1000, b-table 0.",
		"first fire after restart 1.50×, rebalance longest wait 0.90× on the moved partitions and 1.10×",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}
