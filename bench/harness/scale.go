package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// Scalable is a system that can say when it has applied everything
// scheduled, and how much local disk it uses: what the scale phase needs.
type Scalable interface {
	System
	// Applied returns once the system has taken in every scheduled task.
	Applied(ctx context.Context) error
	// Backlog is how many scheduled tasks the system has not yet taken in.
	Backlog(ctx context.Context) (int64, error)
	// DiskBytes is the size of the system's own local state.
	DiskBytes() int64
	// LiveHeapBytes is what the system's heap holds after a garbage
	// collection.
	LiveHeapBytes(ctx context.Context) (int64, error)
}

// ScaleResult is a system's footprint and behaviour with many follow-ups pending.
type ScaleResult struct {
	System     string `json:"system"`
	Repetition int    `json:"repetition"`
	// The floor's steady p99 of a run just before this one (0: none).
	FloorSteadyP99Ms float64 `json:"floor_steady_p99_ms,omitempty"`
	// Prefire is what the first fires before the steady phase measured (Workload.Prefire), if any.
	Prefire *Phase `json:"prefire,omitempty"`
	Pending int    `json:"pending"`
	// Asked is the pending asked for; with a time budget (Scale.For) the
	// phase stops scheduling when the budget is spent, Pending short of it.
	Asked int `json:"asked,omitempty"`
	// SettledSec is how long the system took to go quiet after the intake
	// (Scale.Settle), SettledCPU its and its broker's share of a core over
	// the last settleEvery of that wait.
	SettledSec float64 `json:"settled_sec,omitempty"`
	SettledCPU float64 `json:"settled_cpu_cores,omitempty"`
	// Progress is how many tasks had been applied when, with a time budget.
	Progress      []ScalePoint `json:"progress,omitempty"`
	IngestPerSec  float64      `json:"ingest_per_sec"`  // accepted by the broker
	AppliedPerSec float64      `json:"applied_per_sec"` // taken into the system's state
	RSSBytes      int64        `json:"rss_bytes"`
	RSSPerPending float64      `json:"rss_bytes_per_pending"`
	// The heap after a garbage collection, with everything pending.
	LiveHeapBytes      int64   `json:"live_heap_bytes"`
	LiveHeapPerPending float64 `json:"live_heap_bytes_per_pending"`
	DiskBytes          int64   `json:"local_disk_bytes"`
	BrokerBytes        int64   `json:"broker_bytes"`
	Steady             *Phase  `json:"steady_with_pending,omitempty"`
	RestartFirstSec    float64 `json:"kill9_first_fire_after_restart_seconds"`
	RestartLost        int     `json:"kill9_lost"`
	RestartDups        int     `json:"kill9_duplicates"`
	// Of a Placer: the placements after the restart.
	RestartPlacedFirstSec float64 `json:"kill9_first_placed_after_restart_seconds,omitempty"`
	RestartPlacedLost     int     `json:"kill9_placed_lost,omitempty"`
	RestartPlacedDups     int     `json:"kill9_placed_duplicates,omitempty"`
	Error                 string  `json:"error,omitempty"`
}

// ScalePoint is a moment of the scale phase's intake.
type ScalePoint struct {
	Sec     float64 `json:"sec"`     // since the first task was scheduled
	Applied int64   `json:"applied"` // tasks taken in by then
}

// Scale is what the scale phase schedules: Pending follow-ups, or as many
// as the system takes in within For (0: no bound). With a bound the
// scheduling keeps at most MaxBacklog tasks ahead of the system's intake,
// so that the phase stops with everything it scheduled soon applied, and
// the progress of the intake is recorded as it goes.
//
// Settle, if not 0, is the longest the phase waits after the intake, before
// the steady phase, for the system and its broker to go quiet (SettleCPU):
// the compactions an intake leaves behind (LevelDB's, the broker's log
// cleaner's) are not what a deployment that took its pending in over days
// is doing when its follow-ups fall due.
type Scale struct {
	Pending int
	For     time.Duration
	Settle  time.Duration
}

// SettleCPU is quiet for Scale.Settle: the system and its broker together
// use at most this share of one core over settleEvery.
const SettleCPU = 0.5

const settleEvery = 10 * time.Second

// MaxBacklog is how far scheduling runs ahead of the intake in a scale
// phase with a time budget: about a minute of intake at 10 M pending.
const MaxBacklog = 500000

// RunScale starts a fresh system, schedules pending follow-ups due far in
// the future, measures memory and disk, fires a steady stream on top of
// them, then kills the system with kill -9 and measures the restart.
func RunScale(ctx context.Context, s Scalable, b Backend, env Env, sc Scale, w Workload) ScaleResult {
	pending := sc.Pending
	res := ScaleResult{System: s.Name(), Pending: pending}
	if sc.For > 0 {
		res.Asked = pending
	}
	log := env.Log.With("system", s.Name(), "phase", "scale")
	fail := func(err error) ScaleResult {
		res.Error = err.Error()
		log.Error("scale phase failed", "err", err)
		return res
	}
	if err := s.Start(ctx, env); err != nil {
		return fail(err)
	}
	defer s.Stop()
	octx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	obs := watch(octx, s, log)

	before, err := counters(ctx, b)
	if err != nil {
		return fail(err)
	}
	rng := rand.New(rand.NewPCG(w.Seed, 2))
	// Made a chunk at a time: 100 M tasks held at once would take more
	// memory than the system measured. Due well after the phase.
	farFrom := time.Now().Add(3*time.Hour + sc.For)
	t0 := time.Now()
	const chunk = 100000
	scheduled := 0
	for i := 0; i < pending; i += chunk {
		if sc.For > 0 {
			stop, err := keepUp(ctx, s, t0, sc.For, int64(i), &res.Progress, time.Second, 2*time.Minute)
			if err != nil {
				return fail(err)
			}
			if stop {
				log.Info("scale budget spent", "for", sc.For, "scheduled", i)
				break
			}
		}
		far := makeTasks(rng, "p", min(chunk, pending-i), max(pending/2, 1), farFrom, time.Hour, w.Payload)
		for j := range far { // ids and users as if made at once
			far[j].ID, far[j].User = fmt.Sprintf("p-%d", i+j), fmt.Sprintf("user-%d", (i+j)%max(pending/2, 1))
		}
		if err := s.Schedule(ctx, far); err != nil {
			return fail(err)
		}
		scheduled = i + len(far)
		log.Info("pending scheduled", "n", scheduled)
	}
	if scheduled == 0 {
		return fail(fmt.Errorf("the time budget of %v was spent before anything was scheduled", sc.For))
	}
	pending = scheduled
	res.Pending = pending
	res.IngestPerSec = float64(pending) / time.Since(t0).Seconds()
	if err := s.Applied(ctx); err != nil {
		return fail(err)
	}
	if sc.For > 0 {
		res.Progress = append(res.Progress, ScalePoint{Sec: time.Since(t0).Seconds(), Applied: int64(pending)})
	}
	res.AppliedPerSec = float64(pending) / time.Since(t0).Seconds()
	for _, pid := range s.PIDs() {
		res.RSSBytes += RSS(pid)
	}
	res.RSSPerPending = float64(res.RSSBytes) / float64(pending)
	if res.LiveHeapBytes, err = s.LiveHeapBytes(ctx); err != nil {
		return fail(fmt.Errorf("live heap: %w", err))
	}
	res.LiveHeapPerPending = float64(res.LiveHeapBytes) / float64(pending)
	res.DiskBytes = s.DiskBytes()
	after, err := counters(ctx, b)
	if err != nil {
		return fail(err)
	}
	res.BrokerBytes = after.Sub(before).Bytes
	log.Info("pending applied", "rss_mb", res.RSSBytes>>20, "live_heap_mb", res.LiveHeapBytes>>20, "disk_mb", res.DiskBytes>>20, "applied_per_s", int(res.AppliedPerSec))
	if sc.Settle > 0 {
		t := time.Now()
		if res.SettledCPU, err = settle(ctx, s, b, sc.Settle); err != nil {
			return fail(err)
		}
		res.SettledSec = time.Since(t).Seconds()
		log.Info("scale settled", "after_s", int(res.SettledSec), "cpu_cores", res.SettledCPU)
	}

	if res.Prefire, err = prefire(ctx, Subject{System: s, Backend: b}, obs, w, rng, "w", log); err != nil {
		return fail(err)
	}
	steady, err := runPhase(ctx, Subject{System: s, Backend: b}, obs, w, tasks(rng, "ps", w, w.Window), log)
	if err != nil {
		return fail(fmt.Errorf("steady with pending: %w", err))
	}
	steady.Sample = nil
	res.Steady = steady

	// kill -9 with everything pending, just as probes fall due: the first
	// fire after the restart tells how long the restart took.
	probes := makeTasks(rng, "pk", 2000, 1000, time.Now().Add(w.Lead), 10*time.Second, w.Payload)
	obs.expect(probes)
	if err := s.Schedule(ctx, probes); err != nil {
		return fail(err)
	}
	select {
	case <-ctx.Done():
		return fail(ctx.Err())
	case <-time.After(w.Lead):
	}
	restart, err := killAndRestart(ctx, s)
	if err != nil {
		return fail(err)
	}
	obs.wait(ctx, restart.Add(15*time.Second+w.CrashWait))
	c := obs.crash(probes, restart)
	res.RestartFirstSec, res.RestartLost, res.RestartDups = c.FirstFireAfterSec, c.Lost, c.Duplicates
	res.RestartPlacedFirstSec = -1
	if pl := c.Placed; pl != nil {
		res.RestartPlacedFirstSec, res.RestartPlacedLost, res.RestartPlacedDups = pl.FirstFireAfterSec, pl.Lost, pl.Duplicates
	}
	log.Info("scale phase done", "first_fire_after_restart_s", res.RestartFirstSec, "lost", res.RestartLost, "dups", res.RestartDups)
	return res
}

// keepUp waits until the system's backlog of the scheduled tasks is at
// most MaxBacklog, asking every poll and recording its intake in progress
// every million, and reports whether the budget since t0 is spent.
func keepUp(ctx context.Context, s Scalable, t0 time.Time, budget time.Duration, scheduled int64, progress *[]ScalePoint, poll, patience time.Duration) (bool, error) {
	var failing time.Time // since when every poll failed
	for {
		backlog, err := s.Backlog(ctx)
		if err != nil {
			// A single broker starved by the intake answers for seconds
			// that it leads no partition: ask again, for up to patience.
			if failing.IsZero() {
				failing = time.Now()
			}
			if time.Since(failing) >= patience {
				return false, fmt.Errorf("backlog, failing for %v: %w", time.Since(failing).Round(time.Second), err)
			}
			if err := sleep(ctx, poll); err != nil {
				return false, err
			}
			continue
		}
		failing = time.Time{}
		applied := scheduled - backlog
		if n := len(*progress); n == 0 || applied/1000000 > (*progress)[n-1].Applied/1000000 {
			*progress = append(*progress, ScalePoint{Sec: time.Since(t0).Seconds(), Applied: applied})
		}
		if time.Since(t0) >= budget {
			return true, nil
		}
		if backlog <= MaxBacklog {
			return false, nil
		}
		if err := sleep(ctx, poll); err != nil {
			return false, err
		}
	}
}

// settle waits at most d for s and its broker to use at most SettleCPU of a
// core over settleEvery, and returns their last share.
func settle(ctx context.Context, s System, b Backend, d time.Duration) (float64, error) {
	end := time.Now().Add(d)
	for {
		c0, t0 := systemCPU(s)+CPUTime(b.PID()), time.Now()
		if err := sleep(ctx, settleEvery); err != nil {
			return 0, err
		}
		cores := (systemCPU(s) + CPUTime(b.PID()) - c0).Seconds() / time.Since(t0).Seconds()
		if cores <= SettleCPU || time.Now().After(end) {
			return cores, nil
		}
	}
}
