package main

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/ivrsched/ivrsched/bench/harness"
	"github.com/ivrsched/ivrsched/bench/systems/ivrsched"
)

// A system listed twice would read its first run's fires (same topics, same
// ids) in its second: refused.
func TestChooseRefusesASystemTwice(t *testing.T) {
	_, err := choose("ivrsched-kafka,kafka-floor, ivrsched-kafka")
	if err == nil || !strings.Contains(err.Error(), `"ivrsched-kafka" is listed twice`) {
		t.Fatalf("err %v", err)
	}
	es, err := choose("kafka-floor,ivrsched-kafka")
	if err != nil || len(es) != 2 || es[0].name != "kafka-floor" {
		t.Fatalf("choose: %v %v", es, err)
	}
}

// Each repetition's systems have names (and so topics) of their own.
func TestRunNamesDifferPerRepetition(t *testing.T) {
	for _, e := range registry {
		if got := e.make(e.name + "-r2").Name(); got != e.name+"-r2" {
			t.Errorf("%s: made %q", e.name, got)
		}
	}
}

// The scheduler alone places nothing: the harness must not wait for its
// placements (harness.Placer), while ivrsched-kafka's are measured.
func TestSchedulerAloneHasNoPlacements(t *testing.T) {
	es, err := choose("ivrsched-kafka-sched,ivrsched-kafka")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := es[0].make("s").(harness.Placer); ok {
		t.Error("ivrsched-kafka-sched is a Placer")
	}
	if _, ok := es[1].make("k").(harness.Placer); !ok {
		t.Error("ivrsched-kafka is not a Placer")
	}
	// -ivrsched-bin and -ivrsched-flags reach both.
	for _, e := range es {
		if _, ok := ivrsched.Of(e.make("x")); !ok {
			t.Errorf("%s: no ivrsched System to give a binary and flags", e.name)
		}
	}
}

// Each scale phase's p99 is compared with the floor measured just before
// it, and the phases' ratios are summed up with their spread.
func TestScaleVsTheFloorJustBefore(t *testing.T) {
	var b strings.Builder
	scaleVsFloor(&b, []harness.ScaleResult{
		{System: "ivrsched-kafka-scale", Repetition: 1, Pending: 1000, Steady: &harness.Phase{P99Ms: 60}, FloorSteadyP99Ms: 20},
		{System: "ivrsched-kafka-sched-scale", Repetition: 1, Pending: 1000, Steady: &harness.Phase{P99Ms: 30}, FloorSteadyP99Ms: 20},
		{System: "ivrsched-kafka-scale-r2", Repetition: 2, Pending: 1000, Steady: &harness.Phase{P99Ms: 40}, FloorSteadyP99Ms: 10},
		{System: "ivrsched-kafka-scale-r3", Repetition: 3, Pending: 1000, Steady: &harness.Phase{P99Ms: 50}}, // no floor: no ratio
	})
	out := b.String()
	for _, want := range []string{"Scale phase 1, ivrsched-kafka-scale: with 1000 pending, its steady p99 is 60 ms, 3.00× the floor's 20 ms",
		"Scale phase 1, ivrsched-kafka-sched-scale: with 1000 pending, its steady p99 is 30 ms, 1.50×",
		"Scale phase 2, ivrsched-kafka-scale: with 1000 pending, its steady p99 is 40 ms, 4.00×",
		"ivrsched-kafka-scale with them pending, over 2 scale phases: steady p99 50 (40–60) ms"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Scale phase 3") {
		t.Errorf("a phase without a floor got a ratio:\n%s", out)
	}
}

// The idle phase's flags are checked before anything starts.
func TestIdleFlagsRefusedWhenNegative(t *testing.T) {
	for _, args := range [][]string{{"-idle", "-1s"}, {"-idle", "1s", "-idle-pending", "-1"}, {"-idle-partitions", "-8"}, {"-n", "-1"}} {
		var bad badFlag
		err := run(t.Context(), append(args, "-systems", "none", "-out", t.TempDir()), io.Discard)
		if !errors.As(err, &bad) {
			t.Errorf("%v: %v, want a flag error", args, err)
		}
	}
}
