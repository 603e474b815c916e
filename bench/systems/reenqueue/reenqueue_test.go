package reenqueue

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/bench/harness"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
)

func TestMain(m *testing.M) { kafkatest.Main(m) }

const partitions = 4

// TestLoop schedules 300 tasks due 2-8 s ahead on each variant and checks
// that every one fires, none early, and reports lateness and the
// re-produces the loop caused.
func TestLoop(t *testing.T) {
	brokers := kafkatest.ForTest(t)
	for _, variant := range []string{Immediate, Hold60s} {
		t.Run(variant, func(t *testing.T) {
			r := run(t, brokers, variant, 300, 2*time.Second, 8*time.Second, nil)
			t.Logf("%s: %s", variant, r)
			if r.missing > 0 || r.early > 0 || r.dueMismatch > 0 {
				t.Errorf("want every task fired, none early, due carried; got %d missing, %d early, %d due mismatches",
					r.missing, r.early, r.dueMismatch)
			}
			if r.duplicates > 0 {
				t.Errorf("%d duplicate fires without a crash", r.duplicates)
			}
			switch variant {
			case Immediate:
				if r.reproduced <= int64(r.tasks) {
					t.Errorf("immediate re-enqueue re-produced only %d records for %d tasks due 2-8 s ahead", r.reproduced, r.tasks)
				}
			case Hold60s:
				// Every task is due within one hold: held once, then fired.
				if r.reproduced != 0 {
					t.Errorf("hold60s re-produced %d records for tasks due within 60 s; want 0", r.reproduced)
				}
			}
			if r.loopReproduced >= 0 && r.loopReproduced != r.reproduced {
				t.Errorf("the loop says it re-produced %d records, the delay topic's end offsets say %d",
					r.loopReproduced, r.reproduced)
			}
		})
	}
}

// TestHoldCap runs hold60s with the hold shortened to 1 s, so that tasks
// due 2-8 s ahead go round the delay topic a few times: each costs about
// ceil(delay / hold) - 1 re-produces, the design notes' D / 60 s at scale.
func TestHoldCap(t *testing.T) {
	brokers := kafkatest.ForTest(t)
	r := run(t, brokers, Hold60s, 300, 2*time.Second, 8*time.Second, nil, func(s *System) { s.hold = time.Second })
	t.Logf("hold 1s: %s", r)
	if r.missing > 0 || r.early > 0 || r.dueMismatch > 0 || r.duplicates > 0 {
		t.Errorf("got %d missing, %d early, %d due mismatches, %d duplicates", r.missing, r.early, r.dueMismatch, r.duplicates)
	}
	// Delays are uniform in [2 s, 8 s): ceil(delay / 1 s) - 1 is 1 to 7,
	// 4.5 on average.
	if per := float64(r.reproduced) / float64(r.tasks); per < 3.5 || per > 5.5 {
		t.Errorf("%.2f re-produces per task; want about 4.5", per)
	}
	if r.loopReproduced != r.reproduced {
		t.Errorf("the loop says it re-produced %d records, the delay topic's end offsets say %d", r.loopReproduced, r.reproduced)
	}
}

// TestCrashRecover kills the loop (SIGKILL) while tasks are pending and
// restarts it: every task must still fire (at least once).
func TestCrashRecover(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a group session timeout")
	}
	brokers := kafkatest.ForTest(t)
	for _, variant := range []string{Immediate, Hold60s} {
		t.Run(variant, func(t *testing.T) {
			r := run(t, brokers, variant, 200, 2*time.Second, 6*time.Second, func(ctx context.Context, s *System) {
				time.Sleep(1500 * time.Millisecond)
				if err := s.Crash(); err != nil {
					t.Fatal(err)
				}
				began := time.Now()
				if err := s.Recover(ctx); err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: loop killed and restarted; it owned the partitions again after %v",
					variant, time.Since(began).Round(time.Millisecond))
			})
			t.Logf("%s after kill -9: %s", variant, r)
			if r.missing > 0 || r.early > 0 {
				t.Errorf("want every task fired, none early; got %d missing, %d early", r.missing, r.early)
			}
		})
	}
}

type result struct {
	tasks                   int
	missing, early          int
	duplicates, dueMismatch int
	p50, p90, p99, max      time.Duration
	reproduced              int64 // from the delay topic's end offsets
	loopReproduced          int64 // from the loop's summary line; -1 if none
	scheduleTook, startTook time.Duration
	summaries               []string
}

func (r result) String() string {
	return fmt.Sprintf("%d tasks: lateness p50=%v p90=%v p99=%v max=%v, early=%d, missing=%d, duplicates=%d; "+
		"re-produced %d records (%.1f per task); start %v, schedule %v; loop: %s",
		r.tasks, r.p50, r.p90, r.p99, r.max, r.early, r.missing, r.duplicates,
		r.reproduced, float64(r.reproduced)/float64(r.tasks), r.startTook, r.scheduleTook,
		strings.Join(r.summaries, " | "))
}

// run starts the system, schedules n tasks due between lo and hi from now,
// calls meanwhile (if any) after scheduling, waits until all fired (plus a
// second for duplicates), stops the system and measures.
func run(t *testing.T, brokers, variant string, n int, lo, hi time.Duration,
	meanwhile func(context.Context, *System), configure ...func(*System)) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	name := fmt.Sprintf("reenqueue-%s-%s-%d", variant, strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano()%1e6)
	s := New(name, variant).(*System)
	for _, f := range configure {
		f(s)
	}
	env := harness.Env{
		KafkaBrokers: brokers,
		WorkDir:      t.TempDir(),
		Partitions:   partitions,
		Log:          slog.Default(),
	}
	began := time.Now()
	if err := s.Start(ctx, env); err != nil {
		t.Fatal(err)
	}
	startTook := time.Since(began)
	defer s.Stop()

	fires := make(chan harness.Fire, 1024)
	obsCtx, stopObs := context.WithCancel(ctx)
	obsDone := make(chan error, 1)
	go func() { obsDone <- s.Observe(obsCtx, fires) }()

	now := time.Now()
	tasks := make([]harness.Task, n)
	byID := make(map[string]harness.Task, n)
	for i := range tasks {
		due := now.Add(lo + time.Duration(rand.Int64N(int64(hi-lo))))
		tasks[i] = harness.Task{
			ID:      fmt.Sprintf("task-%04d", i),
			User:    fmt.Sprintf("user-%03d", i/3),
			Due:     due,
			Payload: []byte("follow-up call " + fmt.Sprint(i)),
		}
		byID[tasks[i].ID] = tasks[i]
	}
	began = time.Now()
	if err := s.Schedule(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	scheduleTook := time.Since(began)
	if meanwhile != nil {
		meanwhile(ctx, s)
	}

	first := make(map[string]harness.Fire, n)
	r := result{tasks: n}
	deadline := time.NewTimer(time.Until(now.Add(hi + 60*time.Second)))
	defer deadline.Stop()
	var grace <-chan time.Time
collect:
	for {
		select {
		case f := <-fires:
			task, ok := byID[f.ID]
			if !ok {
				t.Errorf("fire of unknown task %q", f.ID)
				continue
			}
			if !f.Due.Equal(task.Due) {
				r.dueMismatch++
			}
			if _, seen := first[f.ID]; seen {
				r.duplicates++
				continue
			}
			first[f.ID] = f
			if len(first) == n && grace == nil {
				grace = time.After(time.Second)
			}
		case <-grace:
			break collect
		case <-deadline.C:
			break collect
		}
	}
	stopObs()
	if err := <-obsDone; err != nil {
		t.Errorf("observe: %v", err)
	}

	if err := s.Stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	var lateness []time.Duration
	for _, task := range tasks {
		f, ok := first[task.ID]
		if !ok {
			r.missing++
			continue
		}
		d := f.At.Sub(task.Due)
		if d < 0 {
			r.early++
		}
		lateness = append(lateness, d)
	}
	if len(lateness) > 0 {
		slices.Sort(lateness)
		pick := func(q float64) time.Duration {
			return lateness[int(q*float64(len(lateness)-1))].Round(10 * time.Microsecond)
		}
		r.p50, r.p90, r.p99, r.max = pick(0.50), pick(0.90), pick(0.99), pick(1)
	}
	var err error
	if r.reproduced, err = s.Reproduced(ctx, brokers); err != nil {
		t.Fatal(err)
	}
	r.summaries = s.Summaries()
	r.loopReproduced = -1
	if len(r.summaries) == 1 {
		if _, err := fmt.Sscanf(field(r.summaries[0], "reproduced"), "%d", &r.loopReproduced); err != nil {
			r.loopReproduced = -1
		}
	}
	r.startTook, r.scheduleTook = startTook.Round(time.Millisecond), scheduleTook.Round(time.Millisecond)
	return r
}

// field returns the value of key=value in a summary line.
func field(line, key string) string {
	for f := range strings.FieldsSeq(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}
