package harness

import (
	"context"
	"math/rand/v2"
	"net/http/httptest"
	"net/http/pprof"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestObserverPhase(t *testing.T) {
	o := newObserver()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go o.run(ctx)
	t0 := time.Unix(1_800_000_000, 0)
	ts := []Task{{ID: "a", Due: t0}, {ID: "b", Due: t0}, {ID: "c", Due: t0.Add(time.Second)}, {ID: "d", Due: t0}}
	o.expect(ts)
	for _, f := range []Fire{
		{ID: "a", At: t0.Add(10 * time.Millisecond)},
		{ID: "b", At: t0.Add(-5 * time.Millisecond)}, // early
		{ID: "a", At: t0.Add(20 * time.Millisecond)}, // duplicate
		{ID: "c", At: t0.Add(time.Second + 30*time.Millisecond)},
		{ID: "x", At: t0}, // not in this phase
	} {
		o.in <- f
	}
	o.wait(ctx, time.Now().Add(200*time.Millisecond)) // d never fires: returns at the deadline
	p := o.phase(ts)
	if p.Fired != 3 || p.Missing != 1 || p.Duplicates != 1 || p.Early != 1 || p.MaxEarlyMs != 5 {
		t.Fatalf("phase %+v", p)
	}
	if p.P50Ms != 10 || p.MaxMs != 30 {
		t.Fatalf("lateness p50 %v max %v, want 10 and 30 (first fires only)", p.P50Ms, p.MaxMs)
	}
	if at, ok := o.firstAfter(ts, t0.Add(15*time.Millisecond)); !ok || !at.Equal(t0.Add(time.Second+30*time.Millisecond)) {
		t.Fatalf("first fire after: %v %v", at, ok)
	}
}

func TestMakeTasks(t *testing.T) {
	w := Workload{N: 1000, Users: 500, Lead: time.Second, Window: 10 * time.Second, Payload: 3, Seed: 1}
	start := time.Now()
	ts := tasks(rand.New(rand.NewPCG(1, 1)), "s", w, w.Window)
	users := map[string]int{}
	for _, task := range ts {
		users[task.User]++
		if task.Due.Before(start.Add(w.Lead)) || task.Due.After(time.Now().Add(w.Lead+w.Window)) || len(task.Payload) != 3 {
			t.Fatalf("task %+v outside the window", task)
		}
	}
	if len(ts) != 1000 || len(users) != 500 || users["user-0"] != 2 {
		t.Fatalf("%d tasks for %d users", len(ts), len(users))
	}
}

// placer is a System stub whose fires and placements are fed by the test.
type placer struct {
	System
	fires, placed chan Fire
}

func (p placer) Observe(ctx context.Context, out chan<- Fire) error { return relay(ctx, p.fires, out) }
func (p placer) ObservePlaced(ctx context.Context, out chan<- Fire) error {
	return relay(ctx, p.placed, out)
}

func relay(ctx context.Context, in <-chan Fire, out chan<- Fire) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case f := <-in:
			out <- f
		}
	}
}

// A Placer's phase carries the placement figures beside the fire figures.
func TestWatcherMeasuresPlacements(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := placer{fires: make(chan Fire), placed: make(chan Fire)}
	w := watch(ctx, p, nil)
	if w.placed == nil {
		t.Fatal("a Placer's placements are not watched")
	}
	t0 := time.Unix(1_800_000_000, 0)
	ts := []Task{{ID: "a", Due: t0}, {ID: "b", Due: t0}}
	w.expect(ts)
	p.fires <- Fire{ID: "a", At: t0.Add(time.Millisecond)}
	p.fires <- Fire{ID: "b", At: t0.Add(2 * time.Millisecond)}
	p.placed <- Fire{ID: "a", At: t0.Add(5 * time.Millisecond)}
	p.placed <- Fire{ID: "a", At: t0.Add(6 * time.Millisecond)} // placed twice
	w.wait(ctx, time.Now().Add(200*time.Millisecond))           // b never placed: returns at the deadline
	ph := w.phase(ts)
	if ph.Fired != 2 || ph.Duplicates != 0 || ph.MaxMs != 2 {
		t.Fatalf("fired %+v", ph)
	}
	if pl := ph.Placed; pl == nil || pl.Fired != 1 || pl.Missing != 1 || pl.Duplicates != 1 || pl.MaxMs != 5 {
		t.Fatalf("placed %+v", ph.Placed)
	}
}

// LiveHeap reads the heap a Go process keeps, from its pprof handler.
func TestLiveHeap(t *testing.T) {
	srv := httptest.NewServer(pprof.Handler("heap"))
	defer srv.Close()
	keep := make([]byte, 64<<20) // 64 MiB live while measured
	got, err := LiveHeap(context.Background(), srv.URL+"?gc=1&debug=1")
	runtime.KeepAlive(keep)
	if err != nil {
		t.Fatal(err)
	}
	if got < 64<<20 || got > 128<<20 {
		t.Errorf("live heap %d B with 64 MiB kept, want 64 to 128 MiB", got)
	}
	if _, err := parseHeapAlloc(strings.NewReader("heap profile: 0: 0 [0: 0] @ heap/1048576\n")); err == nil {
		t.Error("a profile without HeapAlloc parsed")
	}
	if _, err := LiveHeap(context.Background(), srv.URL+"?gc=1"); err == nil {
		t.Error("no error for a profile not in text form")
	}
}

// Rotated starts repetition rep with element rep and leaves its input as
// it was (the systems' list is rotated again for every repetition).
func TestRotated(t *testing.T) {
	xs := []string{"a", "b", "c"}
	for rep, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}} {
		if got := Rotated(xs, rep); !slices.Equal(got, want) {
			t.Fatalf("repetition %d: %v, want %v", rep, got, want)
		}
	}
	if !slices.Equal(xs, []string{"a", "b", "c"}) {
		t.Fatalf("input changed: %v", xs)
	}
	if got := Rotated([]string(nil), 2); len(got) != 0 {
		t.Fatalf("nothing to rotate: %v", got)
	}
}
