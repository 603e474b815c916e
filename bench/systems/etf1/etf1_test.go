package etf1_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/bench/harness"
	"github.com/ivrsched/ivrsched/bench/systems/etf1"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
)

func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) }

const partitions = 3

func start(t *testing.T, ctx context.Context, sys harness.System) (<-chan harness.Fire, context.CancelFunc) {
	t.Helper()
	env := harness.Env{
		KafkaBrokers: kafkatest.ForTest(t),
		WorkDir:      t.TempDir(),
		Partitions:   partitions,
		Log:          slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	begin := time.Now()
	if err := sys.Start(ctx, env); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("%s: Start took %v (build, topics, group join)", sys.Name(), time.Since(begin).Round(time.Millisecond))
	s := sys.(*etf1.System)
	t.Cleanup(func() {
		if err := sys.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if fi, err := os.Stat(s.LogPath()); err == nil {
			b, _ := os.ReadFile(s.LogPath())
			t.Logf("%s: log %d bytes, %d lines", sys.Name(), fi.Size(), strings.Count(string(b), "\n"))
			if t.Failed() {
				t.Logf("end of etf1 log:\n%s", b[max(0, len(b)-4000):])
			}
		}
	})
	if pids := sys.PIDs(); len(pids) != 1 || syscall.Kill(pids[0], 0) != nil {
		t.Fatalf("PIDs = %v, want one live process", pids)
	}
	t.Logf("%s: env %v", sys.Name(), s.EnvVars())

	fires := make(chan harness.Fire, 10000)
	octx, cancel := context.WithCancel(ctx)
	go func() {
		if err := sys.Observe(octx, fires); err != nil {
			t.Errorf("Observe: %v", err)
		}
	}()
	t.Cleanup(cancel)
	return fires, cancel
}

func makeTasks(prefix string, n int, from, spread time.Duration) []harness.Task {
	now := time.Now()
	tasks := make([]harness.Task, n)
	for i := range tasks {
		tasks[i] = harness.Task{
			ID:      fmt.Sprintf("%s-%04d", prefix, i),
			User:    fmt.Sprintf("u%d", i%50),
			Due:     now.Add(from + time.Duration(rand.Int64N(int64(spread)))),
			Payload: []byte(fmt.Sprintf(`{"task":%d}`, i)),
		}
	}
	return tasks
}

// collect gathers fires until every task has fired and then quiet more, or
// until deadline.
func collect(t *testing.T, fires <-chan harness.Fire, tasks []harness.Task, deadline time.Time, quiet time.Duration) map[string][]harness.Fire {
	t.Helper()
	want := map[string]bool{}
	for _, task := range tasks {
		want[task.ID] = true
	}
	got := map[string][]harness.Fire{}
	seen := 0
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case f := <-fires:
			if !want[f.ID] {
				t.Errorf("unexpected fire %q", f.ID)
				continue
			}
			if len(got[f.ID]) == 0 {
				seen++
			}
			got[f.ID] = append(got[f.ID], f)
			if seen == len(tasks) {
				timer.Reset(quiet)
			}
		case <-timer.C:
			return got
		}
	}
}

type stats struct {
	fired, missing, dups, early int
	p50, p99, max, min          time.Duration
}

func measure(tasks []harness.Task, got map[string][]harness.Fire) stats {
	var st stats
	var lat []time.Duration
	for _, task := range tasks {
		fs := got[task.ID]
		if len(fs) == 0 {
			st.missing++
			continue
		}
		st.fired++
		st.dups += len(fs) - 1
		l := fs[0].At.Sub(task.Due)
		if l < 0 {
			st.early++
		}
		lat = append(lat, l)
	}
	if len(lat) == 0 {
		return st
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	st.p50, st.p99, st.min, st.max = q(0.50), q(0.99), lat[0], lat[len(lat)-1]
	return st
}

func (st stats) String() string {
	return fmt.Sprintf("fired %d, missing %d, duplicates %d, early %d; lateness vs true due: p50 %v p99 %v min %v max %v",
		st.fired, st.missing, st.dups, st.early,
		st.p50.Round(time.Millisecond), st.p99.Round(time.Millisecond), st.min.Round(time.Millisecond), st.max.Round(time.Millisecond))
}

func TestFires(t *testing.T) {
	for _, sys := range etf1.Variants() {
		t.Run(sys.Name(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			fires, _ := start(t, ctx, sys)

			tasks := makeTasks("t", 300, 5*time.Second, 5*time.Second)
			begin := time.Now()
			if err := sys.Schedule(ctx, tasks); err != nil {
				t.Fatalf("Schedule: %v", err)
			}
			t.Logf("Schedule of %d acknowledged in %v", len(tasks), time.Since(begin).Round(time.Millisecond))

			got := collect(t, fires, tasks, time.Now().Add(30*time.Second), 2*time.Second)
			st := measure(tasks, got)
			t.Logf("%s: %v", sys.Name(), st)

			// Lateness against the due time etf1 carried (whole seconds).
			var vsEpoch []time.Duration
			for _, task := range tasks {
				for _, f := range got[task.ID] {
					if want := time.Unix(task.Due.Unix(), 0); !f.Due.Equal(want) {
						t.Errorf("%s: Fire.Due %v, want %v", task.ID, f.Due, want)
					}
					vsEpoch = append(vsEpoch, f.At.Sub(f.Due))
				}
			}
			if len(vsEpoch) > 0 {
				slices.Sort(vsEpoch)
				t.Logf("%s: lateness vs its whole-second epoch: p50 %v p99 %v min %v", sys.Name(),
					vsEpoch[len(vsEpoch)/2].Round(time.Millisecond),
					vsEpoch[min(len(vsEpoch)-1, len(vsEpoch)*99/100)].Round(time.Millisecond),
					vsEpoch[0].Round(time.Millisecond))
			}
			if st.missing > 0 {
				t.Errorf("%d of %d tasks never fired", st.missing, len(tasks))
			}
		})
	}
}

// TestCrashRecover kills etf1 after the schedules are acknowledged and
// before they are due, starts it again and checks that they all fire.
func TestCrashRecover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sys := etf1.New("etf1-crash", etf1.Options{LogLevel: "warn"})
	fires, _ := start(t, ctx, sys)

	tasks := makeTasks("c", 100, 15*time.Second, 3*time.Second)
	if err := sys.Schedule(ctx, tasks); err != nil {
		t.Fatalf("Schedule: %v", err)
	}
	old := sys.PIDs()
	time.Sleep(time.Second) // let etf1 read them
	if err := sys.Crash(); err != nil {
		t.Fatalf("Crash: %v", err)
	}
	if len(sys.PIDs()) != 0 {
		t.Fatalf("PIDs after Crash = %v", sys.PIDs())
	}
	begin := time.Now()
	if err := sys.Recover(ctx); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	t.Logf("Recover took %v; pid %v -> %v", time.Since(begin).Round(time.Millisecond), old, sys.PIDs())

	got := collect(t, fires, tasks, time.Now().Add(40*time.Second), 3*time.Second)
	st := measure(tasks, got)
	t.Logf("after crash+recover: %v", st)
	if st.missing > 0 {
		t.Errorf("%d of %d tasks never fired", st.missing, len(tasks))
	}
}

// TestLoad is a manual load check, skipped unless ETF1_LOAD_N is set:
// ETF1_LOAD_N tasks due over 30 s starting 20 s ahead, on both variants.
func TestLoad(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ETF1_LOAD_N"))
	if n <= 0 {
		t.Skip("set ETF1_LOAD_N to run")
	}
	for _, sys := range etf1.Variants() {
		t.Run(sys.Name(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			fires, _ := start(t, ctx, sys)
			tasks := makeTasks("l", n, 20*time.Second, 30*time.Second)
			begin := time.Now()
			for chunk := range slices.Chunk(tasks, 10000) {
				if err := sys.Schedule(ctx, chunk); err != nil {
					t.Fatalf("Schedule: %v", err)
				}
			}
			el := time.Since(begin)
			t.Logf("Schedule of %d acknowledged in %v (%.0f/s)", n, el.Round(time.Millisecond), float64(n)/el.Seconds())
			got := collect(t, fires, tasks, time.Now().Add(2*time.Minute), 3*time.Second)
			t.Logf("%s: %v", sys.Name(), measure(tasks, got))
		})
	}
}
