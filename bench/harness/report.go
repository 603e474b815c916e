package harness

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
)

// Markdown writes the results as a table, then the ratio lines of subject
// against every other system.
func Markdown(w io.Writer, rs []Result, subject string) {
	fmt.Fprintln(w, "| system | backend | schedule /s | steady lateness p50 / p90 / p99 / max ms | early | burst fires /s | burst p99 ms | backend msgs / follow-up | backend bytes / follow-up | CPU s / 1000 (system + backend) | peak RSS MB | missing | duplicates | kill -9: first fire after restart s / dups / lost | placed (after ivrsched's dialer): steady p99 ms / burst /s / missing / dups / kill -9 first s, dups, lost |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		if r.Error != "" {
			fmt.Fprintf(w, "| %s | %s | error: %s ||||||||||||\n", r.System, r.Backend, strings.ReplaceAll(r.Error, "|", "/"))
			continue
		}
		s, b := r.Steady, r.Burst
		crash := "-"
		if c := r.Crash; c != nil {
			crash = fmt.Sprintf("%.1f / %d / %d", c.FirstFireAfterSec, c.Duplicates, c.Lost)
		}
		placed := "-"
		if sp, bp := s.Placed, b.Placed; sp != nil && bp != nil {
			placed = fmt.Sprintf("%.0f / %.0f / %d / %d", sp.P99Ms, bp.FirePerSec, sp.Missing+bp.Missing, sp.Duplicates+bp.Duplicates)
			if c := r.Crash; c != nil && c.Placed != nil {
				placed += fmt.Sprintf(" / %.1f, %d, %d", c.Placed.FirstFireAfterSec, c.Placed.Duplicates, c.Placed.Lost)
			}
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %.0f / %.0f / %.0f / %.0f | %d (max %.0f ms) | %.0f | %.0f | %.2f | %.0f | %.2f | %.0f | %d | %d | %s | %s |\n",
			r.System, r.Backend, s.SchedulePerSec, s.P50Ms, s.P90Ms, s.P99Ms, s.MaxMs, s.Early+b.Early, math.Max(s.MaxEarlyMs, b.MaxEarlyMs),
			b.FirePerSec, b.P99Ms, s.BackendMsgsPerFU, s.BackendBytesPerFU, s.CPUPer1000, float64(r.PeakRSS)/(1<<20),
			s.Missing+b.Missing, s.Duplicates+b.Duplicates, crash, placed)
	}
	var me *Result
	for i := range rs {
		if rs[i].System == subject && rs[i].Error == "" {
			me = &rs[i]
		}
	}
	if me == nil {
		return
	}
	fmt.Fprintln(w)
	var fire, p99 []string
	for _, r := range rs {
		if r.System == subject || r.Error != "" || r.Burst.FirePerSec == 0 {
			continue
		}
		fire = append(fire, fmt.Sprintf("%.2f× %s's", me.Burst.FirePerSec/r.Burst.FirePerSec, r.System))
		p99 = append(p99, fmt.Sprintf("%s %.0f ms (%.2f×)", r.System, r.Steady.P99Ms, r.Steady.P99Ms/math.Max(me.Steady.P99Ms, 0.001)))
	}
	fmt.Fprintf(w, "Burst fire throughput of %s (%.0f /s): %s.\n\n", subject, me.Burst.FirePerSec, strings.Join(fire, ", "))
	fmt.Fprintf(w, "Steady p99 lateness of %s is %.0f ms; the others' (and their multiple of it): %s. Early fires make a p99 look better than it is: see the early column.\n",
		subject, me.Steady.P99Ms, strings.Join(p99, ", "))
	if sp, bp := me.Steady.Placed, me.Burst.Placed; sp != nil && bp != nil {
		fmt.Fprintf(w, "\nAfter its dialer (calls placed, one result each): %s's burst is %.0f /s, its steady p99 %.0f ms.\n", subject, bp.FirePerSec, sp.P99Ms)
	}
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// LatencySVG plots each system's steady-phase lateness distribution (CDF),
// lateness on a log axis from 1 ms.
func LatencySVG(w io.Writer, rs []Result) {
	const W, H, L, B, R, T = 760, 420, 60, 50, 210, 20
	maxMs := 10.0
	for _, r := range rs {
		if r.Steady != nil {
			maxMs = math.Max(maxMs, r.Steady.MaxMs)
		}
	}
	lx := func(ms float64) float64 {
		return L + (W-L-R)*math.Log10(math.Max(ms, 1))/math.Log10(maxMs)
	}
	ly := func(q float64) float64 { return T + (H-T-B)*(1-q) }
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="14">Steady-phase firing lateness (CDF; early fires clamp to 1 ms)</text>`+"\n", L)
	for d := 1.0; d <= maxMs*1.0001; d *= 10 {
		x := lx(d)
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, T, x, H-B, x, H-B+16, msLabel(d))
	}
	for _, q := range []float64{0, 0.5, 0.9, 0.99, 1} {
		fmt.Fprintf(w, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">p%g</text>`+"\n", L, ly(q), W-R, ly(q), L-4, ly(q)+4, q*100)
	}
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="middle">lateness (log scale)</text>`+"\n", (W-R+L)/2, H-12)
	for i, r := range rs {
		if r.Steady == nil || len(r.Steady.Sample) == 0 {
			continue
		}
		c := palette[i%len(palette)]
		var pts []string
		n := len(r.Steady.Sample)
		for j, ms := range r.Steady.Sample {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", lx(ms), ly(float64(j+1)/float64(n))))
		}
		fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", W-R+10, T+i*18, c, W-R+26, T+i*18+10, r.System)
	}
	fmt.Fprintln(w, "</svg>")
}

// BarsSVG draws one bar per system for the value v returns.
func BarsSVG(w io.Writer, rs []Result, title, unit string, v func(Result) float64) {
	type bar struct {
		name string
		val  float64
		i    int
	}
	var bars []bar
	for i, r := range rs {
		if r.Error == "" {
			bars = append(bars, bar{r.System, v(r), i})
		}
	}
	sort.SliceStable(bars, func(a, b int) bool { return bars[a].val > bars[b].val })
	const W, L, row, T = 760, 190, 26, 30
	H := T + row*len(bars) + 20
	maxV := 1e-9
	for _, b := range bars {
		maxV = math.Max(maxV, b.val)
	}
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/><text x="10" y="18">%s</text>`+"\n", title)
	for j, b := range bars {
		y := T + j*row
		bw := (W - L - 110) * b.val / maxV
		fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">%s</text><rect x="%d" y="%d" width="%.1f" height="18" fill="%s"/><text x="%.1f" y="%d">%s %s</text>`+"\n",
			L-6, y+13, b.name, L, y, bw, palette[b.i%len(palette)], float64(L)+bw+6, y+13, human(b.val), unit)
	}
	fmt.Fprintln(w, "</svg>")
}

func msLabel(ms float64) string {
	switch {
	case ms >= 1000:
		return fmt.Sprintf("%gs", ms/1000)
	default:
		return fmt.Sprintf("%gms", ms)
	}
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// ScaleMarkdown writes the scale phase's figures.
func ScaleMarkdown(w io.Writer, ss []ScaleResult) {
	if len(ss) == 0 {
		return
	}
	fmt.Fprintln(w, "\n| system | pending | ingest /s | applied /s | RSS MB | RSS B / pending | live heap MB | live heap B / pending | local disk MB | broker MB | steady p50 / p99 / max ms with them pending | early | kill -9: first fire after restart s / lost / dups | placed: steady p99 ms / kill -9 first s, lost, dups |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range ss {
		if s.Error != "" {
			fmt.Fprintf(w, "| %s | %d | error: %s ||||||||||||\n", s.System, s.Pending, strings.ReplaceAll(s.Error, "|", "/"))
			continue
		}
		st := s.Steady
		placed := "-"
		if st.Placed != nil {
			placed = fmt.Sprintf("%.0f / %.1f, %d, %d", st.Placed.P99Ms, s.RestartPlacedFirstSec, s.RestartPlacedLost, s.RestartPlacedDups)
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f / %.0f / %.0f | %d | %.1f / %d / %d | %s |\n",
			s.System, s.Pending, s.IngestPerSec, s.AppliedPerSec, float64(s.RSSBytes)/(1<<20), s.RSSPerPending,
			float64(s.LiveHeapBytes)/(1<<20), s.LiveHeapPerPending,
			float64(s.DiskBytes)/(1<<20), float64(s.BrokerBytes)/(1<<20), st.P50Ms, st.P99Ms, st.MaxMs, st.Early,
			s.RestartFirstSec, s.RestartLost, s.RestartDups, placed)
	}
	for _, s := range ss {
		if s.SettledSec > 0 {
			fmt.Fprintf(w, "\n%s went quiet %.0f s after its intake (%.2f cores with its broker), before the steady phase.\n", s.System, s.SettledSec, s.SettledCPU)
		}
		if p := s.Prefire; p != nil {
			fmt.Fprintf(w, "\nThe first %d fires after the intake of %s (prefire, left out of its steady figures): p50 / p99 / max %.0f / %.0f / %.0f ms, %d missing.\n",
				p.Fired+p.Missing, s.System, p.P50Ms, p.P99Ms, p.MaxMs, p.Missing)
		}
		if len(s.Progress) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nIntake of %s, %d scheduled of %d asked, with a time budget (applied by then):", s.System, s.Pending, s.Asked)
		for _, p := range s.Progress {
			fmt.Fprintf(w, " %.1f M at %.0f s;", float64(p.Applied)/1e6, p.Sec)
		}
		fmt.Fprintln(w)
	}
}

// RetentionMarkdown writes the retention phase: a row per state of the
// table, then what the retention did and the ratios against the baseline.
func RetentionMarkdown(w io.Writer, rs []RetentionResult) {
	for _, r := range rs {
		fmt.Fprintf(w, "\nRetention phase (%s): %d follow-ups pending for %d users, %d idle users, --retain %s once measured.\n\n", r.System, r.Pending, r.Pending/2, r.Idle, r.Retain)
		fmt.Fprintln(w, "| state | table keys | kill -9: first fire after restart s | lost / dups / early | restart: records restored, slowest index build s | rebalance, moved partitions: longest wait s | lost / dups / early | joiner: records restored, slowest restore s, keys, slowest build s | stayed partitions: longest wait s | lost / dups / early | stayed: keys, slowest build s | against the baseline: restart / moved / stayed |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
		for _, s := range r.States {
			if s.Error != "" {
				fmt.Fprintf(w, "| %s | error: %s |||||||||||\n", s.Name, strings.ReplaceAll(s.Error, "|", "/"))
				continue
			}
			rs, mv, st := s.Restart, s.Rebalance.Moved, s.Rebalance.Stayed
			vs := "-"
			if v := s.VsBaseline; v != [3]float64{} {
				vs = fmt.Sprintf("%.2f× / %.2f× / %.2f×", v[0], v[1], v[2])
			}
			fmt.Fprintf(w, "| %s | %d | %.1f | %d / %d / %d | %d, %.1f | %.1f | %d / %d / %d | %d, %.1f, %d, %.1f | %.1f | %d / %d / %d | %d, %.1f | %s |\n",
				s.Name, s.Users, rs.FirstFireSec, rs.Lost, rs.Duplicates, rs.Early, rs.Opened.Restored, rs.Opened.MaxBuildSec,
				mv.LongestWaitSec, mv.Lost, mv.Duplicates, mv.Early, mv.Opened.Restored, mv.Opened.MaxRestoreSec, mv.Opened.Keys, mv.Opened.MaxBuildSec,
				st.LongestWaitSec, st.Lost, st.Duplicates, st.Early, st.Opened.Keys, st.Opened.MaxBuildSec, vs)
		}
		fmt.Fprintln(w)
		if r.Error != "" {
			fmt.Fprintf(w, "Error: %s\n", r.Error)
		}
		fmt.Fprintf(w, "Idle users: applied at %.0f /s, fired at %.0f /s, %d not fired.\n", r.IdleAppliedPerSec, r.IdleFiredPerSec, r.IdleLost)
		var tombs []string
		for _, t := range slices.Sorted(maps.Keys(r.Tombstones)) {
			tombs = append(tombs, fmt.Sprintf("%s %d", t, r.Tombstones[t]))
		}
		fmt.Fprintf(w, "Retention: %d of %d idle users reported expired, the first %.1f s and the last %.1f s after the restart with --retain %s (%.0f /s); tombstones: %s.\n",
			r.Expired, r.Idle, r.FirstExpiredSec, r.RetentionSec, r.Retain, r.ExpiredPerSec, strings.Join(tombs, ", "))
		if r.TableBytesBefore > 0 {
			fmt.Fprintf(w, "Compaction (segments rolled every second, any dirty ratio): the scheduler table's log went from %.0f to %.0f MB in %.0f s.\n",
				float64(r.TableBytesBefore)/(1<<20), float64(r.TableBytesAfter)/(1<<20), r.CompactSec)
		}
		if r.RestartRatio > 0 {
			fmt.Fprintf(w, "After retention against the baseline (goal: at most 2×): first fire after restart %.2f×, rebalance longest wait %.2f× on the moved partitions and %.2f× on those that stayed.\n",
				r.RestartRatio, r.MovedRatio, r.StayedRatio)
		}
	}
}
