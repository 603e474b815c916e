package asynq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/bench/harness"
)

// startRedis starts redis-server for a test, or skips the test when it is
// not installed (fails under CI=true).
func startRedis(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	addr, stop, err := StartRedis(ctx, t.TempDir())
	if errors.Is(err, ErrNoRedisServer) && os.Getenv("CI") != "true" {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return addr
}

func TestFires(t *testing.T) {
	for _, sys := range []harness.System{Default(), Fast()} {
		t.Run(sys.Name(), func(t *testing.T) { testFires(t, sys) })
	}
}

// testFires schedules 500 tasks due over 3 s and checks that each fires.
// asynq may fire early (whole-second scores): that is logged, not failed.
func testFires(t *testing.T, sys harness.System) {
	const n = 500
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	env := harness.Env{
		RedisAddr: startRedis(t),
		WorkDir:   t.TempDir(),
		Log:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if err := sys.Start(ctx, env); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sys.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if pids := sys.PIDs(); len(pids) != 1 || pids[0] == os.Getpid() {
		t.Errorf("PIDs() = %v, want the worker's pid", pids)
	}

	fires := make(chan harness.Fire, n)
	obsCtx, stopObserving := context.WithCancel(ctx)
	observed := make(chan error, 1)
	go func() { observed <- sys.Observe(obsCtx, fires) }()

	start := time.Now().Add(500 * time.Millisecond)
	tasks := make([]harness.Task, n)
	due := make(map[string]time.Time, n)
	for i := range tasks {
		tasks[i] = harness.Task{
			ID:      fmt.Sprintf("t%04d", i),
			User:    fmt.Sprintf("u%d", i%50),
			Due:     start.Add(time.Duration(i) * 3 * time.Second / n),
			Payload: []byte("follow-up"),
		}
		due[tasks[i].ID] = tasks[i].Due
	}
	t0 := time.Now()
	if err := sys.Schedule(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	t.Logf("scheduled %d in %s", n, time.Since(t0))

	seen := make(map[string]int, n)
	var lateness []time.Duration
	early, dups := 0, 0
	var maxEarly time.Duration
	for len(lateness) < n {
		select {
		case f := <-fires:
			d, ok := due[f.ID]
			if !ok {
				t.Fatalf("fire of unknown task %q", f.ID)
			}
			if !f.Due.Equal(d) {
				t.Errorf("task %s: fire carries due %s, want %s", f.ID, f.Due, d)
			}
			if seen[f.ID]++; seen[f.ID] > 1 {
				dups++
				continue
			}
			late := f.At.Sub(d)
			lateness = append(lateness, late)
			if late < 0 {
				early++
				maxEarly = max(maxEarly, -late)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d tasks fired before the timeout", len(lateness), n)
		}
	}
	stopObserving()
	if err := <-observed; err != nil {
		t.Errorf("Observe: %v", err)
	}
	if dups > 0 {
		t.Errorf("%d duplicate fires", dups)
	}
	slices.Sort(lateness)
	q := func(p float64) time.Duration { return lateness[int(p*float64(len(lateness)-1))] }
	t.Logf("%s: %d fired; lateness min %s p50 %s p99 %s max %s; early %d (%.0f%%), by at most %s",
		sys.Name(), n, lateness[0], q(0.50), q(0.99), lateness[n-1], early, 100*float64(early)/n, maxEarly)
}

func TestParseFire(t *testing.T) {
	f, err := parseFire([]byte("t1 1700000000000000001 1700000000000000000"))
	if err != nil {
		t.Fatal(err)
	}
	if f.ID != "t1" || f.At.UnixNano() != 1700000000000000001 || f.Due.UnixNano() != 1700000000000000000 {
		t.Errorf("parseFire = %+v", f)
	}
	for _, bad := range []string{"", "t1 2", "t1 x 3", "t1 2 y", "a b c d"} {
		if _, err := parseFire([]byte(bad)); err == nil {
			t.Errorf("parseFire(%q): no error", bad)
		}
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	due := time.Unix(1700000000, 123456789)
	p := EncodePayload(due, []byte("x"))
	got, err := DecodeDue(p)
	if err != nil || got != due.UnixNano() || string(p[8:]) != "x" {
		t.Errorf("DecodeDue = %d, %v; payload tail %q", got, err, p[8:])
	}
	if _, err := DecodeDue([]byte{1, 2}); err == nil {
		t.Error("DecodeDue of 2 bytes: no error")
	}
}
