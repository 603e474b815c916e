package harness

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// IdleWorkload is the idle phase: a system holds pending follow-ups of
// which none falls due while its CPU and the broker's are measured.
type IdleWorkload struct {
	Pending int           // follow-ups scheduled, all due an hour or more ahead
	Settle  time.Duration // wait after they are applied, before measuring
	Measure time.Duration // the measurement
	Payload int
	Seed    uint64
}

// IdleResult is what a system costs while nothing is due. A Floor system
// is not started at all: its figures are the broker's with no client.
type IdleResult struct {
	System     string `json:"system"`
	Repetition int    `json:"repetition"`
	Partitions int    `json:"partitions"`
	Pending    int    `json:"pending"`
	Floor      bool   `json:"floor,omitempty"`
	// MeasuredSeconds is the wall time the CPU figures are over.
	MeasuredSeconds float64 `json:"measured_seconds"`
	// SystemCPUPct is the system's processes' CPU in % of one core.
	SystemCPUPct float64 `json:"system_cpu_pct"`
	// BrokerCPUPct is the broker process's CPU in % of one core.
	BrokerCPUPct float64 `json:"broker_cpu_pct"`
	// SystemWritesPerSec is the write system calls of the system's
	// processes per second: about the requests its clients send.
	SystemWritesPerSec float64 `json:"system_writes_per_sec"`
	Error              string  `json:"error,omitempty"`
}

// RunIdle starts s (unless it is the floor), schedules w.Pending follow-ups
// due from an hour ahead, waits until a Scalable system has applied them
// and then w.Settle more, and measures the CPU of s's processes and of the
// backend over w.Measure. No observer or producer of the harness is
// connected while it measures.
func RunIdle(ctx context.Context, s Subject, env Env, w IdleWorkload) IdleResult {
	res := IdleResult{System: s.System.Name(), Partitions: env.Partitions, Floor: IsFloor(s.System)}
	log := env.Log.With("system", s.System.Name(), "phase", "idle")
	fail := func(err error) IdleResult {
		res.Error = err.Error()
		log.Error("idle phase failed", "err", err)
		return res
	}
	if s.Backend == nil || s.Backend.PID() == 0 {
		return fail(fmt.Errorf("idle: no broker process to measure"))
	}
	if !res.Floor {
		if err := s.System.Start(ctx, env); err != nil {
			return fail(fmt.Errorf("start: %w", err))
		}
		defer func() {
			if err := s.System.Stop(); err != nil {
				log.Warn("stop", "err", err)
			}
		}()
		rng := rand.New(rand.NewPCG(w.Seed, 3))
		ts := makeTasks(rng, "i", w.Pending, max(w.Pending/2, 1), time.Now().Add(time.Hour), time.Hour, w.Payload)
		res.Pending = len(ts)
		if len(ts) > 0 {
			if err := s.System.Schedule(ctx, ts); err != nil {
				return fail(fmt.Errorf("schedule: %w", err))
			}
		}
		if sc, ok := s.System.(Scalable); ok {
			if err := sc.Applied(ctx); err != nil {
				return fail(fmt.Errorf("applied: %w", err))
			}
		}
	}
	log.Info("idle phase: settling", "for", w.Settle, "then_measuring", w.Measure)
	if err := sleep(ctx, w.Settle); err != nil {
		return fail(err)
	}
	broker := s.Backend.PID()
	sys0, b0, w0, t0 := systemCPU(s.System), CPUTime(broker), writeCalls(s.System), time.Now()
	if res.Floor {
		sys0 = 0
	}
	if err := sleep(ctx, w.Measure); err != nil {
		return fail(err)
	}
	sys1, b1, w1, el := systemCPU(s.System), CPUTime(broker), writeCalls(s.System), time.Since(t0)
	if res.Floor {
		sys1, w0, w1 = 0, 0, 0
	}
	res.SystemWritesPerSec = float64(w1-w0) / el.Seconds()
	res.MeasuredSeconds = el.Seconds()
	res.SystemCPUPct = 100 * (sys1 - sys0).Seconds() / el.Seconds()
	res.BrokerCPUPct = 100 * (b1 - b0).Seconds() / el.Seconds()
	log.Info("idle phase done", "system_cpu_pct", res.SystemCPUPct, "broker_cpu_pct", res.BrokerCPUPct, "writes_per_s", res.SystemWritesPerSec)
	return res
}

func writeCalls(s System) int64 {
	var n int64
	for _, pid := range s.PIDs() {
		n += WriteCalls(pid)
	}
	return n
}

// IdleSummary is one system's idle figures over the repetitions.
type IdleSummary struct {
	System    string `json:"system"`
	SystemCPU Spread `json:"system_cpu_pct"`
	BrokerCPU Spread `json:"broker_cpu_pct"`
	// OverFloor is the broker's CPU minus the floor's broker CPU of the
	// same repetition, in percentage points.
	OverFloor Spread `json:"broker_over_floor_pp"`
	Writes    Spread `json:"system_writes_per_sec"`
}

// SummarizeIdle is the median and min–max of each system's idle runs, in
// the order of systems; runs with an error are left out.
func SummarizeIdle(rs []IdleResult, systems []string) []IdleSummary {
	floor := map[int]float64{}
	for _, r := range rs {
		if r.Floor && r.Error == "" {
			floor[r.Repetition] = r.BrokerCPUPct
		}
	}
	var out []IdleSummary
	for _, name := range systems {
		var sys, brk, over, wr []float64
		for _, r := range rs {
			if r.Error != "" || r.System != name {
				continue
			}
			sys, brk, wr = append(sys, r.SystemCPUPct), append(brk, r.BrokerCPUPct), append(wr, r.SystemWritesPerSec)
			f, ok := floor[r.Repetition]
			if !ok {
				f = math.NaN()
			}
			over = append(over, r.BrokerCPUPct-f)
		}
		if len(sys) == 0 {
			continue
		}
		out = append(out, IdleSummary{System: name, SystemCPU: SpreadOf(sys), BrokerCPU: SpreadOf(brk), OverFloor: SpreadOf(over), Writes: SpreadOf(wr)})
	}
	return out
}

// IdleMarkdown writes the idle phase's table (nothing if rs is empty).
func IdleMarkdown(w io.Writer, rs []IdleResult, systems []string) {
	if len(rs) == 0 {
		return
	}
	pending := slices.MaxFunc(rs, func(a, b IdleResult) int { return a.Pending - b.Pending }).Pending
	fmt.Fprintf(w, "\nIdle phase, %d partitions per topic: %d follow-ups pending, none due within the hour; CPU in %% of one core over %.0f s, medians over %d repetitions with min–max in brackets; kafka-floor is the broker with no client at all.\n\n",
		rs[0].Partitions, pending, rs[0].MeasuredSeconds, maxRep(rs))
	fmt.Fprintln(w, "| system | system CPU % | broker CPU % | broker − floor's (pp) | system's write calls/s (≈ requests/s) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	for _, s := range SummarizeIdle(rs, systems) {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", s.System, s.SystemCPU.Format("%.1f"), s.BrokerCPU.Format("%.1f"), s.OverFloor.Format("%+.1f"), s.Writes.Format("%.0f"))
	}
	for _, r := range rs {
		if r.Error != "" {
			fmt.Fprintf(w, "\n%s (repetition %d) failed: %s\n", r.System, r.Repetition, r.Error)
		}
	}
}

func maxRep(rs []IdleResult) int {
	return slices.MaxFunc(rs, func(a, b IdleResult) int { return a.Repetition - b.Repetition }).Repetition
}
