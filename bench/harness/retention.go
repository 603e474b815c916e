package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Retainer is a scheduler whose idle users a retention removes: what the
// retention phase needs of it besides what the scale phase needs.
type Retainer interface {
	Scalable
	// Partition is the partition that holds user's state.
	Partition(user string) int32
	// Join starts a second scheduler instance, with its own empty local
	// state, that joins the first one's group; Leave stops it gracefully.
	Join(ctx context.Context) error
	Leave() error
	// Joined is the partitions the second instance owns.
	Joined(ctx context.Context) ([]int32, error)
	// SetRetention restarts the scheduler gracefully with retention d.
	SetRetention(ctx context.Context, d time.Duration) error
	// ObserveExpired sends a Fire whose ID is the user id for every user
	// the system reports removed by retention, until ctx ends.
	ObserveExpired(ctx context.Context, out chan<- Fire) error
	// Tombstones counts the deletes on each table's changelog.
	Tombstones(ctx context.Context) (map[string]int64, error)
	// Opens is what opening each table partition cost since a time.
	Opens(since time.Time) ([]PartitionOpen, error)
}

// Compacter is a Retainer whose table the broker can be made to compact
// now, as it would once the table's changelog rolled its active segment.
type Compacter interface {
	// Compact returns once the table's log shrank, with its bytes before
	// and after.
	Compact(ctx context.Context) (before, after int64, err error)
}

// PartitionOpen is what opening one table partition cost an instance:
// the changelog records restored into its local store, then the due index
// built with one scan of the store.
type PartitionOpen struct {
	Instance   string    `json:"instance"` // main or joiner
	Partition  int32     `json:"partition"`
	At         time.Time `json:"at"`
	Restored   int64     `json:"records_restored"` // -1: not logged
	RestoreSec float64   `json:"restore_seconds"`
	Keys       int64     `json:"index_keys_scanned"` // -1: not logged
	Pending    int64     `json:"index_pending"`
	BuildSec   float64   `json:"index_build_seconds"`
}

// Opened sums the opens of some partitions.
type Opened struct {
	Partitions    int     `json:"partitions"`
	Restored      int64   `json:"records_restored"`
	MaxRestoreSec float64 `json:"max_restore_seconds"`
	Keys          int64   `json:"index_keys_scanned"`
	MaxBuildSec   float64 `json:"max_index_build_seconds"`
}

func sumOpens(os []PartitionOpen, keep func(PartitionOpen) bool) Opened {
	var o Opened
	for _, p := range os {
		if !keep(p) {
			continue
		}
		o.Partitions++
		o.Restored += max(p.Restored, 0)
		o.MaxRestoreSec = max(o.MaxRestoreSec, p.RestoreSec)
		o.Keys += max(p.Keys, 0)
		o.MaxBuildSec = max(o.MaxBuildSec, p.BuildSec)
	}
	return o
}

// RestartFigures is a kill -9 of the scheduler and its restart, with
// probes due from the kill on.
type RestartFigures struct {
	FirstFireSec float64 `json:"first_fire_after_restart_seconds"`
	Lost         int     `json:"lost"`
	Duplicates   int     `json:"duplicates"`
	Early        int     `json:"early"`
	// The table partitions the restarted scheduler opened.
	Opened Opened `json:"opened"`
}

// RebalanceSide is the probes of the partitions that moved to the second
// instance, or of those that stayed.
type RebalanceSide struct {
	Partitions []int32 `json:"partitions"`
	Probes     int     `json:"probes"`
	// LongestWaitSec is the largest lateness of a probe: how long fires
	// stopped on these partitions, as probes were due all along.
	LongestWaitSec float64 `json:"longest_wait_seconds"`
	P50Sec         float64 `json:"lateness_p50_seconds"`
	Lost           int     `json:"lost"`
	Duplicates     int     `json:"duplicates"`
	Early          int     `json:"early"`
	// The partitions opened by their owner after the join.
	Opened Opened `json:"opened"`
}

// RebalanceFigures is a second scheduler instance joining.
type RebalanceFigures struct {
	Moved  RebalanceSide `json:"moved"`
	Stayed RebalanceSide `json:"stayed"`
}

// RetentionState is the restart and the rebalance in one state of the table.
type RetentionState struct {
	Name      string           `json:"name"`
	Users     int64            `json:"table_keys"` // keys the restart's index builds scanned
	Restart   RestartFigures   `json:"restart"`
	Rebalance RebalanceFigures `json:"rebalance"`
	// Against the baseline: first fire after the restart, longest wait on
	// the moved and on the stayed partitions (0: not measured).
	VsBaseline [3]float64 `json:"vs_baseline"`
	Error      string     `json:"error,omitempty"`
}

// RetentionResult is the retention phase: restart and rebalance with only
// the pending follow-ups in the table, with idle users too, and after the
// retention removed them.
type RetentionResult struct {
	System  string           `json:"system"`
	Idle    int              `json:"idle_users"`
	Pending int              `json:"pending"`
	Retain  string           `json:"retain"`
	States  []RetentionState `json:"states"`

	IdleAppliedPerSec float64 `json:"idle_applied_per_sec"`
	IdleFiredPerSec   float64 `json:"idle_fired_per_sec"` // first due to last fire
	IdleLost          int     `json:"idle_lost"`

	// RetentionSec runs from the restart with the short retention to the
	// last idle user reported removed.
	RetentionSec       float64          `json:"retention_seconds"`
	FirstExpiredSec    float64          `json:"first_expired_after_restart_seconds"`
	Expired            int              `json:"idle_expired"`
	ExpiredPerSec      float64          `json:"expired_per_sec"` // first to last report
	Tombstones         map[string]int64 `json:"tombstones"`
	RetentionRestarted time.Time        `json:"retention_restarted_at"`

	// With Compact: the scheduler table's bytes on the broker before and
	// after the broker compacted it, and how long that took.
	TableBytesBefore int64   `json:"table_bytes_before_compaction,omitempty"`
	TableBytesAfter  int64   `json:"table_bytes_after_compaction,omitempty"`
	CompactSec       float64 `json:"compaction_seconds,omitempty"`

	// After retention against the baseline (the goal: at most 2).
	RestartRatio float64 `json:"restart_ratio"`
	MovedRatio   float64 `json:"rebalance_moved_ratio"`
	StayedRatio  float64 `json:"rebalance_stayed_ratio"`
	Error        string  `json:"error,omitempty"`
}

// RetentionWorkload is the retention phase's sizes.
type RetentionWorkload struct {
	Idle    int           // users onboarded whose follow-ups all fire
	Pending int           // follow-ups pending far in the future, for Pending/2 users
	Retain  time.Duration // the short retention of the last state
	Probes  int           // probe follow-ups per measurement
	// ProbeWindow is how long the rebalance's probes are due over.
	ProbeWindow time.Duration
	// Compact: after retention, have the broker compact the table (the
	// system must be a Compacter) and measure once more.
	Compact bool
	// Lead, CrashWait, Payload and Seed are the workload's.
	Workload
}

const (
	baselineState = "baseline"
	beforeState   = "before retention"
	afterState    = "after retention"
	compactState  = "after retention and compaction"
)

// RunRetention measures what a table of idle users costs a restart and a
// rebalance, before and after retention removes them:
//
//  1. a fresh system with Pending follow-ups due hours ahead: a kill -9 and
//     restart, then a second instance joining (the baseline);
//  2. Idle users onboarded whose follow-ups all fire (the system runs with
//     its default retention, so none expires yet): the same again;
//  3. the scheduler restarted with the short retention, every idle user
//     reported removed: the same again.
//
// Each measurement has probes due from the kill or the join on.
func RunRetention(ctx context.Context, s Retainer, b Backend, env Env, rw RetentionWorkload) RetentionResult {
	res := RetentionResult{System: s.Name(), Idle: rw.Idle, Pending: rw.Pending, Retain: rw.Retain.String()}
	log := env.Log.With("system", s.Name(), "phase", "retention")
	fail := func(err error) RetentionResult {
		res.Error = err.Error()
		log.Error("retention phase failed", "err", err)
		return res
	}
	if err := s.Start(ctx, env); err != nil {
		return fail(err)
	}
	defer func() {
		if err := s.Stop(); err != nil {
			log.Warn("stop", "err", err)
		}
	}()
	octx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	obs := watch(octx, s, log)
	expired := startObserver(octx, s.ObserveExpired, log)
	m := &measurer{s: s, env: env, rw: rw, obs: obs, rng: rand.New(rand.NewPCG(rw.Seed, 3)), log: log}

	far := makeTasks(m.rng, "p", rw.Pending, max(rw.Pending/2, 1), time.Now().Add(3*time.Hour), time.Hour, rw.Payload)
	if err := m.schedule(ctx, far); err != nil {
		return fail(err)
	}
	if err := s.Applied(ctx); err != nil {
		return fail(err)
	}
	log.Info("pending applied", "n", rw.Pending)
	res.States = append(res.States, m.state(ctx, baselineState))

	// Idle users: one follow-up each, due soon, all fired.
	idle := makeTasks(m.rng, "i", rw.Idle, rw.Idle, time.Now().Add(rw.Lead), 20*time.Second, rw.Payload)
	users := make([]Task, len(idle))
	for i := range idle {
		idle[i].User = fmt.Sprintf("idle-%d", i)
		users[i] = Task{ID: idle[i].User}
	}
	obs.expect(idle)
	t0 := time.Now()
	if err := m.schedule(ctx, idle); err != nil {
		return fail(err)
	}
	if err := s.Applied(ctx); err != nil {
		return fail(err)
	}
	res.IdleAppliedPerSec = float64(rw.Idle) / time.Since(t0).Seconds()
	_, lastDue := dueSpan(idle)
	obs.wait(ctx, lastDue.Add(10*time.Minute))
	p := obs.phase(idle)
	res.IdleFiredPerSec, res.IdleLost = p.FirePerSec, p.Missing
	if p.Placed != nil {
		res.IdleLost = max(res.IdleLost, p.Placed.Missing)
	}
	log.Info("idle users fired", "n", p.Fired, "missing", p.Missing, "fired_per_s", int(p.FirePerSec), "applied_per_s", int(res.IdleAppliedPerSec))
	if p.Missing > 0 {
		return fail(fmt.Errorf("%d of the %d idle users' follow-ups did not fire within 10 minutes of their due time", p.Missing, rw.Idle))
	}
	idle = nil
	res.States = append(res.States, m.state(ctx, beforeState))

	// Retention: the users' retention timers fall due LastActive (their due
	// time) + Retain after it; restart with it once all are due.
	if wait := time.Until(lastDue.Add(rw.Retain + time.Second)); wait > 0 {
		log.Info("waiting for the idle users' retention to pass", "for", wait.Round(time.Second))
		if err := sleep(ctx, wait); err != nil {
			return fail(err)
		}
	}
	expired.expect(users)
	res.RetentionRestarted = time.Now()
	log.Info("restarting the scheduler with the short retention", "retain", rw.Retain)
	if err := s.SetRetention(ctx, rw.Retain); err != nil {
		return fail(err)
	}
	expired.wait(ctx, time.Now().Add(30*time.Minute))
	first, last, n := expired.span(users)
	res.Expired = n
	if n > 0 {
		res.FirstExpiredSec = first.Sub(res.RetentionRestarted).Seconds()
		res.RetentionSec = last.Sub(res.RetentionRestarted).Seconds()
		if span := last.Sub(first); span > 0 {
			res.ExpiredPerSec = float64(n) / span.Seconds()
		}
	}
	log.Info("retention done", "expired", n, "of", rw.Idle, "took_s", res.RetentionSec)
	var err error
	if res.Tombstones, err = s.Tombstones(ctx); err != nil {
		return fail(err)
	}
	if n < rw.Idle {
		return fail(fmt.Errorf("%d of the %d idle users reported expired within 30 minutes of the restart with --retain %v", n, rw.Idle, rw.Retain))
	}
	res.States = append(res.States, m.state(ctx, afterState))

	if rw.Compact {
		c, ok := s.(Compacter)
		if !ok {
			return fail(fmt.Errorf("%s cannot have its table compacted", s.Name()))
		}
		log.Info("having the broker compact the table")
		t := time.Now()
		if res.TableBytesBefore, res.TableBytesAfter, err = c.Compact(ctx); err != nil {
			return fail(err)
		}
		res.CompactSec = time.Since(t).Seconds()
		log.Info("table compacted", "bytes_before", res.TableBytesBefore, "bytes_after", res.TableBytesAfter, "took_s", res.CompactSec)
		res.States = append(res.States, m.state(ctx, compactState))
	}

	base := res.States[0]
	for i := range res.States[1:] {
		st := &res.States[i+1]
		st.VsBaseline = [3]float64{ratio(st.Restart.FirstFireSec, base.Restart.FirstFireSec),
			ratio(st.Rebalance.Moved.LongestWaitSec, base.Rebalance.Moved.LongestWaitSec),
			ratio(st.Rebalance.Stayed.LongestWaitSec, base.Rebalance.Stayed.LongestWaitSec)}
	}
	res.RestartRatio, res.MovedRatio, res.StayedRatio = res.States[2].VsBaseline[0], res.States[2].VsBaseline[1], res.States[2].VsBaseline[2]
	return res
}

func ratio(a, b float64) float64 {
	if a < 0 || b <= 0 {
		return 0
	}
	return a / b
}

// measurer runs the measurements of the retention phase.
type measurer struct {
	s   Retainer
	env Env
	rw  RetentionWorkload
	obs *watcher
	rng *rand.Rand
	log interface {
		Info(string, ...any)
		Error(string, ...any)
	}
	n int // measurements so far, for unique task ids
}

func (m *measurer) schedule(ctx context.Context, ts []Task) error {
	const chunk = 100000
	for i := 0; i < len(ts); i += chunk {
		if err := m.s.Schedule(ctx, ts[i:min(i+chunk, len(ts))]); err != nil {
			return err
		}
		if len(ts) > chunk {
			m.log.Info("scheduled", "n", min(i+chunk, len(ts)), "of", len(ts))
		}
	}
	return nil
}

// state measures a restart, then a rebalance; an error is recorded in the
// state, and the next state still runs.
func (m *measurer) state(ctx context.Context, name string) RetentionState {
	st := RetentionState{Name: name}
	m.log.Info("measuring", "state", name)
	err := m.settle(ctx)
	if err == nil {
		st.Restart, err = m.restart(ctx)
	}
	if err == nil {
		st.Users = st.Restart.Opened.Keys
		err = m.settle(ctx)
	}
	if err == nil {
		st.Rebalance, err = m.rebalance(ctx)
	}
	if err != nil {
		st.Error = err.Error()
		m.log.Error("measurement failed", "state", name, "err", err)
	}
	m.log.Info("measured", "state", name, "keys", st.Users, "restart_first_fire_s", st.Restart.FirstFireSec,
		"moved_wait_s", st.Rebalance.Moved.LongestWaitSec, "stayed_wait_s", st.Rebalance.Stayed.LongestWaitSec)
	return st
}

// settle returns once one follow-up per partition, due now, fired: every
// partition has an owner that fires.
func (m *measurer) settle(ctx context.Context) error {
	m.n++
	var ts []Task
	seen := map[int32]bool{}
	for i := 0; len(seen) < m.env.Partitions && i < 100000; i++ {
		u := fmt.Sprintf("user-%d", i)
		if p := m.s.Partition(u); !seen[p] {
			seen[p] = true
			ts = append(ts, Task{ID: fmt.Sprintf("settle%d-%d", m.n, i), User: u, Due: time.Now(), Payload: make([]byte, m.rw.Payload)})
		}
	}
	m.obs.expect(ts)
	if err := m.s.Schedule(ctx, ts); err != nil {
		return err
	}
	const limit = 5 * time.Minute
	m.obs.wait(ctx, time.Now().Add(limit))
	if p := m.obs.phase(ts); p.Missing > 0 || (p.Placed != nil && p.Placed.Missing > 0) {
		return fmt.Errorf("not settled: %d of %d follow-ups due now not fired within %v", p.Missing, len(ts), limit)
	}
	return ctx.Err()
}

// probes are follow-ups due over window from Lead on, for users that hold
// pending follow-ups (so they never become idle).
func (m *measurer) probes(window time.Duration) []Task {
	m.n++
	ts := makeTasks(m.rng, fmt.Sprintf("probe%d", m.n), m.rw.Probes, min(max(m.rw.Probes/2, 1), max(m.rw.Pending/2, 1)), time.Now().Add(m.rw.Lead), window, m.rw.Payload)
	return ts
}

// restart kills the scheduler with kill -9 as the probes fall due and
// restarts it at once.
func (m *measurer) restart(ctx context.Context) (RestartFigures, error) {
	f := RestartFigures{FirstFireSec: -1}
	ts := m.probes(10 * time.Second)
	m.obs.expect(ts)
	if err := m.s.Schedule(ctx, ts); err != nil {
		return f, err
	}
	first, last := dueSpan(ts)
	if err := sleep(ctx, time.Until(first)); err != nil {
		return f, err
	}
	restart, err := killAndRestart(ctx, m.s)
	if err != nil {
		return f, err
	}
	m.obs.wait(ctx, last.Add(m.rw.CrashWait))
	c := m.obs.crash(ts, restart)
	f.FirstFireSec, f.Lost, f.Duplicates, f.Early = c.FirstFireAfterSec, c.Lost, c.Duplicates, c.Early
	if pl := c.Placed; pl != nil {
		f.Lost, f.Duplicates = max(f.Lost, pl.Lost), max(f.Duplicates, pl.Duplicates)
	}
	opens, err := m.s.Opens(restart)
	if err != nil {
		return f, err
	}
	f.Opened = sumOpens(opens, func(PartitionOpen) bool { return true })
	m.log.Info("restart measured", "first_fire_s", f.FirstFireSec, "lost", f.Lost, "dups", f.Duplicates, "keys", f.Opened.Keys, "max_build_s", f.Opened.MaxBuildSec)
	return f, nil
}

// rebalance starts the second instance as the probes fall due, waits for
// them, and splits them by whether their partition moved to it; then the
// second instance leaves.
func (m *measurer) rebalance(ctx context.Context) (RebalanceFigures, error) {
	var f RebalanceFigures
	ts := m.probes(m.rw.ProbeWindow)
	m.obs.expect(ts)
	if err := m.s.Schedule(ctx, ts); err != nil {
		return f, err
	}
	first, last := dueSpan(ts)
	if err := sleep(ctx, time.Until(first)); err != nil {
		return f, err
	}
	join := time.Now()
	if err := m.s.Join(ctx); err != nil {
		return f, fmt.Errorf("join: %w", err)
	}
	defer func() {
		if err := m.s.Leave(); err != nil {
			m.log.Error("second instance did not stop cleanly", "err", err)
		}
	}()
	m.obs.wait(ctx, last.Add(m.rw.CrashWait))
	moved, err := m.s.Joined(ctx)
	if err != nil {
		return f, err
	}
	opens, err := m.s.Opens(join)
	if err != nil {
		return f, err
	}
	f = splitRebalance(m.obs, ts, moved, m.env.Partitions, m.s.Partition, opens)
	m.log.Info("rebalance measured", "moved", f.Moved.Partitions, "moved_wait_s", f.Moved.LongestWaitSec, "stayed_wait_s", f.Stayed.LongestWaitSec,
		"lost", f.Moved.Lost+f.Stayed.Lost, "joiner_restored", f.Moved.Opened.Restored)
	if len(moved) == 0 {
		return f, errors.New("no partition moved to the second instance")
	}
	return f, nil
}

// splitRebalance gives the figures of the probes whose partitions moved
// and of those whose partitions stayed.
func splitRebalance(w *watcher, ts []Task, moved []int32, partitions int, partition func(string) int32, opens []PartitionOpen) RebalanceFigures {
	var f RebalanceFigures
	var mv, stay []Task
	for _, t := range ts {
		if slices.Contains(moved, partition(t.User)) {
			mv = append(mv, t)
		} else {
			stay = append(stay, t)
		}
	}
	side := func(ts []Task, parts []int32, instance string) RebalanceSide {
		sd := RebalanceSide{Partitions: parts, Probes: len(ts), LongestWaitSec: -1}
		if len(ts) > 0 {
			p := w.phase(ts)
			sd.LongestWaitSec, sd.P50Sec = p.MaxMs/1000, p.P50Ms/1000
			sd.Lost, sd.Duplicates, sd.Early = p.Missing, p.Duplicates, p.Early
			if pl := p.Placed; pl != nil {
				sd.Lost, sd.Duplicates = max(sd.Lost, pl.Missing), max(sd.Duplicates, pl.Duplicates)
			}
		}
		sd.Opened = sumOpens(opens, func(o PartitionOpen) bool { return o.Instance == instance })
		return sd
	}
	var stayed []int32
	for p := range int32(partitions) {
		if !slices.Contains(moved, p) {
			stayed = append(stayed, p)
		}
	}
	moved = slices.Sorted(slices.Values(moved))
	f.Moved = side(mv, moved, "joiner")
	f.Stayed = side(stay, stayed, "main")
	return f
}

// dueSpan is the earliest and the latest due time of ts.
func dueSpan(ts []Task) (first, last time.Time) {
	first, last = ts[0].Due, ts[0].Due
	for _, t := range ts {
		if t.Due.Before(first) {
			first = t.Due
		}
		if t.Due.After(last) {
			last = t.Due
		}
	}
	return first, last
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
