package harness

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// Spread is the median of a figure over the repetitions, with its minimum
// and maximum.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// SpreadOf is the median, minimum and maximum of vs (NaNs, which stand for
// a ratio without a floor, left out).
func SpreadOf(vs []float64) Spread {
	var xs []float64
	for _, v := range vs {
		if !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return Spread{} // N 0: no figure
	}
	slices.Sort(xs)
	m := xs[len(xs)/2]
	if len(xs)%2 == 0 {
		m = (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	return Spread{Median: m, Min: xs[0], Max: xs[len(xs)-1], N: len(xs)}
}

// Format writes the median with the min–max after it, in format f.
func (s Spread) Format(f string) string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 || s.Min == s.Max {
		return fmt.Sprintf(f, s.Median)
	}
	return fmt.Sprintf(f+" ("+f+"–"+f+")", s.Median, s.Min, s.Max)
}

// Summary is one system's figures over the repetitions. Ratios are to the
// floor's figure of the same repetition.
type Summary struct {
	System         string `json:"system"`
	Runs           int    `json:"runs"`
	Failed         int    `json:"failed"`
	SteadyP50Ms    Spread `json:"steady_p50_ms"`
	SteadyP99Ms    Spread `json:"steady_p99_ms"`
	SteadyP50Floor Spread `json:"steady_p50_vs_floor"`
	SteadyP99Floor Spread `json:"steady_p99_vs_floor"`
	BurstPerSec    Spread `json:"burst_fires_per_sec"`
	BurstSeconds   Spread `json:"burst_seconds"`
	BurstP99Ms     Spread `json:"burst_p99_ms"`
	BurstP99Floor  Spread `json:"burst_p99_vs_floor"`
	RecordsPerFU   Spread `json:"backend_messages_per_followup"`
	CPUPer1000     Spread `json:"cpu_seconds_per_1000"`
	CrashFirstSec  Spread `json:"crash_first_fire_after_restart_seconds"`
	PlacedP99Ms    Spread `json:"placed_steady_p99_ms"`
	Early          int    `json:"early"`
	Missing        int    `json:"missing"`
	Duplicates     int    `json:"duplicates"`
	CrashLost      int    `json:"crash_lost"`
	CrashDups      int    `json:"crash_duplicates"`
	// PrefireP99Ms is the p99 of the first fires before the steady phase
	// (Workload.Prefire), RestartP99Ms of as many after a kill -9 restart
	// following them (Workload.PrefireRestart).
	PrefireP99Ms Spread `json:"prefire_p99_ms"`
	RestartP99Ms Spread `json:"after_restart_p99_ms"`
}

// Summarize groups rs by system, in the order of systems, with each
// repetition's ratios to the floor of that repetition.
func Summarize(rs []Result, systems []string) []Summary {
	floor := map[int]*Result{}
	for i := range rs {
		if rs[i].Floor && rs[i].Error == "" {
			floor[rs[i].Repetition] = &rs[i]
		}
	}
	ratio := func(r Result, v func(*Phase) float64, of func(Result) *Phase) float64 {
		f, ok := floor[r.Repetition]
		if !ok || of(*f) == nil || of(r) == nil || v(of(*f)) <= 0 {
			return math.NaN()
		}
		return v(of(r)) / v(of(*f))
	}
	steady := func(r Result) *Phase { return r.Steady }
	burst := func(r Result) *Phase { return r.Burst }
	p50 := func(p *Phase) float64 { return p.P50Ms }
	p99 := func(p *Phase) float64 { return p.P99Ms }
	var out []Summary
	for _, name := range systems {
		s := Summary{System: name}
		var sp50, sp99, sp50f, sp99f, bps, bsec, bp99, bp99f, recs, cpu, first, placed, pre, again []float64
		for _, r := range rs {
			if r.System != name {
				continue
			}
			s.Runs++
			if r.Error != "" || r.Steady == nil || r.Burst == nil {
				s.Failed++
				continue
			}
			st, b := r.Steady, r.Burst
			sp50, sp99 = append(sp50, st.P50Ms), append(sp99, st.P99Ms)
			sp50f = append(sp50f, ratio(r, p50, steady))
			sp99f = append(sp99f, ratio(r, p99, steady))
			bps, bp99 = append(bps, b.FirePerSec), append(bp99, b.P99Ms)
			if b.FirePerSec > 0 {
				bsec = append(bsec, float64(b.Fired)/b.FirePerSec)
			}
			bp99f = append(bp99f, ratio(r, p99, burst))
			recs, cpu = append(recs, st.BackendMsgsPerFU), append(cpu, st.CPUPer1000)
			if st.Placed != nil {
				placed = append(placed, st.Placed.P99Ms)
			}
			if r.Prefire != nil {
				pre = append(pre, r.Prefire.P99Ms)
			}
			if r.AfterRestart != nil {
				again = append(again, r.AfterRestart.P99Ms)
			}
			s.Early += st.Early + b.Early
			s.Missing += st.Missing + b.Missing
			s.Duplicates += st.Duplicates + b.Duplicates
			if c := r.Crash; c != nil {
				if c.FirstFireAfterSec >= 0 {
					first = append(first, c.FirstFireAfterSec)
				}
				s.CrashLost += c.Lost
				s.CrashDups += c.Duplicates
			}
		}
		s.SteadyP50Ms, s.SteadyP99Ms = SpreadOf(sp50), SpreadOf(sp99)
		s.SteadyP50Floor, s.SteadyP99Floor = SpreadOf(sp50f), SpreadOf(sp99f)
		s.BurstPerSec, s.BurstSeconds, s.BurstP99Ms, s.BurstP99Floor = SpreadOf(bps), SpreadOf(bsec), SpreadOf(bp99), SpreadOf(bp99f)
		s.RecordsPerFU, s.CPUPer1000 = SpreadOf(recs), SpreadOf(cpu)
		s.CrashFirstSec, s.PlacedP99Ms = SpreadOf(first), SpreadOf(placed)
		s.PrefireP99Ms, s.RestartP99Ms = SpreadOf(pre), SpreadOf(again)
		out = append(out, s)
	}
	return out
}

// SummaryMarkdown writes the medians with their min–max over the
// repetitions and the ratios to the floor, then subject's burst against
// every other system's (the median of the repetitions' ratios).
func SummaryMarkdown(w io.Writer, rs []Result, systems []string, subject string) {
	ss := Summarize(rs, systems)
	fmt.Fprintln(w, "Medians over the repetitions, with min–max in brackets; \"× floor\" is the ratio to kafka-floor's figure of the same repetition (one hop through the broker at the same rate and record size).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| system | runs | steady p50 ms | steady p99 ms | steady p99 × floor | burst fires /s | burst lasts s | burst p99 ms | burst p99 × floor | records / follow-up | CPU s / 1000 | early / missing / dups | kill -9: first fire after restart s (lost, dups) | placed: steady p99 ms |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range ss {
		if s.Runs == 0 {
			continue
		}
		name := s.System
		if s.Failed > 0 {
			name += fmt.Sprintf(" (%d failed)", s.Failed)
		}
		crash := "-"
		if s.CrashFirstSec.N > 0 || s.CrashLost > 0 || s.CrashDups > 0 {
			crash = fmt.Sprintf("%s (%d, %d)", s.CrashFirstSec.Format("%.1f"), s.CrashLost, s.CrashDups)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d / %d / %d | %s | %s |\n",
			name, s.Runs, s.SteadyP50Ms.Format("%.0f"), s.SteadyP99Ms.Format("%.0f"), s.SteadyP99Floor.Format("%.2f"),
			s.BurstPerSec.Format("%.0f"), s.BurstSeconds.Format("%.1f"), s.BurstP99Ms.Format("%.0f"), s.BurstP99Floor.Format("%.2f"),
			s.RecordsPerFU.Format("%.2f"), s.CPUPer1000.Format("%.2f"), s.Early, s.Missing, s.Duplicates, crash, s.PlacedP99Ms.Format("%.0f"))
	}
	firstFiresMarkdown(w, ss)
	// subject's burst against each other system, per repetition.
	var fire []string
	for _, other := range systems {
		if other == subject {
			continue
		}
		var xs []float64
		for _, a := range rs {
			if a.System != subject || a.Error != "" || a.Burst == nil {
				continue
			}
			for _, b := range rs {
				if b.System == other && b.Repetition == a.Repetition && b.Error == "" && b.Burst != nil && b.Burst.FirePerSec > 0 {
					xs = append(xs, a.Burst.FirePerSec/b.Burst.FirePerSec)
				}
			}
		}
		if len(xs) > 0 {
			fire = append(fire, fmt.Sprintf("%s× %s's", SpreadOf(xs).Format("%.2f"), other))
		}
	}
	if len(fire) > 0 {
		fmt.Fprintf(w, "\nBurst fire throughput of %s, per repetition against the others' of the same repetition: %s.\n", subject, strings.Join(fire, ", "))
	}
}

// firstFiresMarkdown writes the lateness of the first fires that were left
// out of the steady figures (and of those after a restart), if any.
func firstFiresMarkdown(w io.Writer, ss []Summary) {
	if !slices.ContainsFunc(ss, func(s Summary) bool { return s.PrefireP99Ms.N > 0 }) {
		return
	}
	fmt.Fprintln(w, "\nFirst fires, before each steady phase and left out of its figures (a system's first records on its fresh topics), and as many again after a kill -9 and restart following them, where measured:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| system | first fires p99 ms | after a restart p99 ms |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, s := range ss {
		if s.PrefireP99Ms.N > 0 {
			fmt.Fprintf(w, "| %s | %s | %s |\n", s.System, s.PrefireP99Ms.Format("%.0f"), s.RestartP99Ms.Format("%.0f"))
		}
	}
}
