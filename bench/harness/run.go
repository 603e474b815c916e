package harness

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Workload is what every system is given.
type Workload struct {
	N       int           // follow-ups of the steady phase
	Burst   int           // follow-ups of the burst phase, for Burst/2 users (0: N)
	Users   int           // N/2 in the workload
	Lead    time.Duration // first due time after the start of scheduling
	Window  time.Duration // steady phase: due times uniform over this window
	Payload int           // payload bytes
	Crash   int           // follow-ups of the crash phase (0: no crash phase)
	Wait    time.Duration // how long after the last due time fires may take
	// CrashWait is how long after the last due time of the crash phase fires
	// may take; a follow-up not fired by then counts as lost.
	CrashWait time.Duration
	Seed      uint64
	// Prefire follow-ups are fired before each steady phase, over 2 s from 3 s
	// after their scheduling, and left out of its figures: the first fires
	// on a system's fresh topics (its producers' first metadata, the
	// broker's first appends) are then not counted as steady. 0: none.
	Prefire int
	// PrefireRestart: after the first fires, each system that can crash is
	// killed (SIGKILL) and started again on its topics, and as many
	// follow-ups are fired once more (Result.AfterRestart): whether a
	// restart pays the first fires' cost again. Needs Prefire.
	PrefireRestart bool
}

// Phase is the figures of one phase of one system.
type Phase struct {
	Scheduled       int     `json:"scheduled"`
	ScheduleSeconds float64 `json:"schedule_seconds"`
	SchedulePerSec  float64 `json:"schedule_per_sec"`
	Fired           int     `json:"fired"`
	Missing         int     `json:"missing"`
	Duplicates      int     `json:"duplicates"`
	Early           int     `json:"early"`
	MaxEarlyMs      float64 `json:"max_early_ms"`
	P50Ms           float64 `json:"lateness_p50_ms"`
	P90Ms           float64 `json:"lateness_p90_ms"`
	P99Ms           float64 `json:"lateness_p99_ms"`
	MaxMs           float64 `json:"lateness_max_ms"`
	FirePerSec      float64 `json:"fire_per_sec"` // fired / (last fire - first due)
	// Lateness sample (ms, sorted) for plots; at most 2,000 points.
	Sample []float64 `json:"lateness_sample_ms,omitempty"`
	// Timeline is the lateness by due time, in slices of TimelineStep
	// from the first due time: where in a phase its tail is.
	Timeline []TimelineSlice `json:"timeline,omitempty"`

	SystemCPUSeconds  float64 `json:"system_cpu_seconds"`
	BackendCPUSeconds float64 `json:"backend_cpu_seconds"`
	CPUPer1000        float64 `json:"cpu_seconds_per_1000"` // system + backend
	BackendMsgsPerFU  float64 `json:"backend_messages_per_followup"`
	BackendBytesPerFU float64 `json:"backend_bytes_per_followup"`
	// Kafka records per follow-up, per topic.
	TopicMsgsPerFU map[string]float64 `json:"topic_messages_per_followup,omitempty"`
	// Placed is the same phase seen at the placement stage (a Placer's).
	Placed *Phase `json:"placed,omitempty"`
}

// TimelineStep is the width of a Phase's timeline slices.
const TimelineStep = 250 * time.Millisecond

// TimelineSlice is the lateness of the fired follow-ups due in one slice
// of a phase: [AtMs, AtMs + TimelineStep) after its first due time.
type TimelineSlice struct {
	AtMs  int64   `json:"at_ms"`
	Fired int     `json:"fired"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// timeline slices fired follow-ups (their due times, their lateness in
// ms) by due time, from first.
func timeline(first time.Time, due []time.Time, late []float64) []TimelineSlice {
	by := map[int64][]float64{}
	for i, d := range due {
		k := int64(d.Sub(first) / TimelineStep)
		by[k] = append(by[k], late[i])
	}
	var out []TimelineSlice
	for _, k := range slices.Sorted(maps.Keys(by)) {
		l := by[k]
		slices.Sort(l)
		out = append(out, TimelineSlice{AtMs: k * TimelineStep.Milliseconds(), Fired: len(l), P50Ms: quantile(l, 0.5), P99Ms: quantile(l, 0.99), MaxMs: l[len(l)-1]})
	}
	return out
}

// quantile is the f quantile of sorted (not empty).
func quantile(sorted []float64, f float64) float64 {
	return sorted[min(len(sorted)-1, int(f*float64(len(sorted))))]
}

// CrashResult is what a kill -9 and restart cost.
type CrashResult struct {
	Scheduled         int     `json:"scheduled"`
	FirstFireAfterSec float64 `json:"first_fire_after_restart_seconds"`
	Duplicates        int     `json:"duplicates"`
	Lost              int     `json:"lost"`
	Early             int     `json:"early"`
	P99Ms             float64 `json:"lateness_p99_ms"`
	MaxMs             float64 `json:"lateness_max_ms"`
	// RestartedAt is when the killed process was started again (to read
	// its log against).
	RestartedAt time.Time `json:"restarted_at"`
	// Placed is the same phase seen at the placement stage (a Placer's).
	Placed *CrashResult `json:"placed,omitempty"`
}

// Result is one system's figures.
type Result struct {
	System    string       `json:"system"`
	Backend   string       `json:"backend"`
	Steady    *Phase       `json:"steady,omitempty"`
	Burst     *Phase       `json:"burst,omitempty"`
	Crash     *CrashResult `json:"crash,omitempty"`
	PeakRSS   int64        `json:"peak_rss_bytes"` // the system's processes, summed
	Error     string       `json:"error,omitempty"`
	StartedAt time.Time    `json:"started_at"`
	// Floor marks the run's one-hop floor (a Floor system).
	Floor bool `json:"floor,omitempty"`
	// Repetition is the 1-based repetition of the phases this result is of.
	Repetition int `json:"repetition,omitempty"`
	// Prefire is what the first fires before the steady phase measured (Workload.Prefire), if any.
	Prefire *Phase `json:"prefire,omitempty"`
	// AfterRestart is what as many first fires measured after a kill -9
	// and restart following them (Workload.PrefireRestart), if any.
	AfterRestart *Phase `json:"after_restart,omitempty"`
}

// Subject is a system with the backend it uses.
type Subject struct {
	System  System
	Backend Backend
	Name    string // backend name for the report
}

// Run runs the workload's phases against one system.
func Run(ctx context.Context, s Subject, env Env, w Workload) Result {
	res := Result{System: s.System.Name(), Backend: s.Name, StartedAt: time.Now(), Floor: IsFloor(s.System)}
	log := env.Log.With("system", s.System.Name())
	fail := func(err error) Result {
		res.Error = err.Error()
		log.Error("benchmark failed", "err", err)
		return res
	}
	if err := s.System.Start(ctx, env); err != nil {
		return fail(fmt.Errorf("start: %w", err))
	}
	defer func() {
		if err := s.System.Stop(); err != nil {
			log.Warn("stop", "err", err)
		}
	}()
	octx, stopObs := context.WithCancel(ctx)
	defer stopObs()
	obs := watch(octx, s.System, log)

	rng := rand.New(rand.NewPCG(w.Seed, 1))
	pre, err := prefire(ctx, s, obs, w, rng, "w", log)
	if err != nil {
		return fail(err)
	}
	res.Prefire = pre
	if pre != nil && w.PrefireRestart && !res.Floor {
		if res.AfterRestart, err = refire(ctx, s, obs, w, rng, log); err != nil {
			return fail(err)
		}
	}
	log.Info("steady phase", "n", w.N, "window", w.Window)
	steady, err := runPhase(ctx, s, obs, w, tasks(rng, "s", w, w.Window), log)
	if err != nil {
		return fail(fmt.Errorf("steady: %w", err))
	}
	res.Steady = steady
	bw := w
	if w.Burst > 0 {
		bw.N, bw.Users = w.Burst, max(w.Burst/2, 1)
	}
	log.Info("burst phase", "n", bw.N)
	burst, err := runPhase(ctx, s, obs, w, tasks(rng, "b", bw, 0), log)
	if err != nil {
		return fail(fmt.Errorf("burst: %w", err))
	}
	res.Burst = burst
	for _, pid := range s.System.PIDs() {
		res.PeakRSS += PeakRSS(pid)
	}
	if w.Crash > 0 && !res.Floor {
		log.Info("crash phase", "n", w.Crash)
		c, err := runCrash(ctx, s, obs, w, rng)
		if err != nil {
			return fail(fmt.Errorf("crash: %w", err))
		}
		res.Crash = c
	}
	return res
}

// tasks makes w.N tasks for w.Users users due over window (0: all at once),
// starting w.Lead from now.
func tasks(rng *rand.Rand, phase string, w Workload, window time.Duration) []Task {
	return makeTasks(rng, phase, w.N, w.Users, time.Now().Add(w.Lead), window, w.Payload)
}

func makeTasks(rng *rand.Rand, phase string, n, users int, first time.Time, window time.Duration, payload int) []Task {
	out := make([]Task, n)
	pl := make([]byte, payload)
	for i := range pl {
		pl[i] = byte('a' + i%26)
	}
	for i := range out {
		due := first
		if window > 0 {
			due = first.Add(time.Duration(rng.Int64N(int64(window))))
		}
		out[i] = Task{ID: fmt.Sprintf("%s-%d", phase, i), User: fmt.Sprintf("user-%d", i%max(users, 1)), Due: due, Payload: pl}
	}
	return out
}

func runPhase(ctx context.Context, s Subject, obs *watcher, w Workload, ts []Task, log interface{ Info(string, ...any) }) (*Phase, error) {
	obs.expect(ts)
	before, err := counters(ctx, s.Backend)
	if err != nil {
		return nil, err
	}
	cpu0 := systemCPU(s.System)
	t0 := time.Now()
	if err := s.System.Schedule(ctx, ts); err != nil {
		return nil, err
	}
	schedDur := time.Since(t0)
	last := ts[0].Due
	for _, t := range ts {
		if t.Due.After(last) {
			last = t.Due
		}
	}
	obs.wait(ctx, last.Add(w.Wait))
	after, err := counters(ctx, s.Backend)
	if err != nil {
		return nil, err
	}
	p := obs.phase(ts)
	p.Scheduled = len(ts)
	p.ScheduleSeconds = schedDur.Seconds()
	p.SchedulePerSec = float64(len(ts)) / schedDur.Seconds()
	p.SystemCPUSeconds = (systemCPU(s.System) - cpu0).Seconds()
	d := after.Sub(before)
	p.BackendCPUSeconds = d.CPU.Seconds()
	p.CPUPer1000 = (p.SystemCPUSeconds + p.BackendCPUSeconds) * 1000 / float64(len(ts))
	p.BackendMsgsPerFU = float64(d.Messages) / float64(len(ts))
	p.BackendBytesPerFU = float64(d.Bytes) / float64(len(ts))
	for t, n := range d.Topics {
		if p.TopicMsgsPerFU == nil {
			p.TopicMsgsPerFU = map[string]float64{}
		}
		p.TopicMsgsPerFU[t] = float64(n) / float64(len(ts))
	}
	log.Info("phase done", "fired", p.Fired, "missing", p.Missing, "dups", p.Duplicates, "early", p.Early, "p99_ms", p.P99Ms, "sched_per_s", int(p.SchedulePerSec))
	return p, nil
}

func counters(ctx context.Context, b Backend) (Counters, error) {
	if b == nil {
		return Counters{}, nil
	}
	return b.Counters(ctx)
}

func systemCPU(s System) time.Duration {
	var d time.Duration
	for _, pid := range s.PIDs() {
		d += CPUTime(pid)
	}
	return d
}

// runCrash schedules w.Crash tasks due over 10 s, kills the system at the
// middle of that window and restarts it at once.
func runCrash(ctx context.Context, s Subject, obs *watcher, w Workload, rng *rand.Rand) (*CrashResult, error) {
	const window = 10 * time.Second
	ts := makeTasks(rng, "c", w.Crash, max(w.Crash/2, 1), time.Now().Add(w.Lead), window, w.Payload)
	obs.expect(ts)
	if err := s.System.Schedule(ctx, ts); err != nil {
		return nil, err
	}
	mid := ts[0].Due
	for _, t := range ts {
		if t.Due.Before(mid) {
			mid = t.Due
		}
	}
	mid = mid.Add(window / 2)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Until(mid)):
	}
	restart, err := killAndRestart(ctx, s.System)
	if err != nil {
		return nil, err
	}
	obs.wait(ctx, mid.Add(window/2+w.CrashWait))
	return obs.crash(ts, restart), nil
}

// watcher observes a system's fires and, for a Placer, its placements.
type watcher struct {
	fired, placed *observer
}

// watch starts observing s until ctx ends.
func watch(ctx context.Context, s System, log interface{ Error(string, ...any) }) *watcher {
	w := &watcher{fired: startObserver(ctx, s.Observe, log)}
	if p, ok := s.(Placer); ok {
		w.placed = startObserver(ctx, p.ObservePlaced, log)
	}
	return w
}

// startObserver records what observe sends until ctx ends.
func startObserver(ctx context.Context, observe func(context.Context, chan<- Fire) error, log interface{ Error(string, ...any) }) *observer {
	o := newObserver()
	go func() {
		if err := observe(ctx, o.in); err != nil && ctx.Err() == nil {
			log.Error("observe", "err", err)
		}
	}()
	go o.run(ctx)
	return o
}

func (w *watcher) expect(ts []Task) {
	w.fired.expect(ts)
	if w.placed != nil {
		w.placed.expect(ts)
	}
}

// wait returns when every expected task fired (and was placed), or at deadline.
func (w *watcher) wait(ctx context.Context, deadline time.Time) {
	w.fired.wait(ctx, deadline)
	if w.placed != nil {
		w.placed.wait(ctx, deadline)
	}
}

// crash is what a kill -9 and the restart at restart cost ts, with the
// placed figures nested; a first fire of -1 s means none after the restart.
func (w *watcher) crash(ts []Task, restart time.Time) *CrashResult {
	of := func(o *observer) *CrashResult {
		p := o.phase(ts)
		c := &CrashResult{Scheduled: len(ts), Duplicates: p.Duplicates, Lost: p.Missing, Early: p.Early, P99Ms: p.P99Ms, MaxMs: p.MaxMs, FirstFireAfterSec: -1, RestartedAt: restart}
		if first, ok := o.firstAfter(ts, restart); ok {
			c.FirstFireAfterSec = first.Sub(restart).Seconds()
		}
		return c
	}
	c := of(w.fired)
	if w.placed != nil {
		c.Placed = of(w.placed)
	}
	return c
}

// phase is the fired figures of ts, with the placed ones nested.
func (w *watcher) phase(ts []Task) *Phase {
	p := w.fired.phase(ts)
	if w.placed != nil {
		p.Placed = w.placed.phase(ts)
		p.Placed.Sample = nil
	}
	return p
}

// observer records every fire.
type observer struct {
	in chan Fire

	mu     sync.Mutex
	first  map[string]time.Time // ID → first fire
	count  map[string]int
	want   map[string]bool
	got    int
	change chan struct{}
}

func newObserver() *observer {
	return &observer{in: make(chan Fire, 4096), first: map[string]time.Time{}, count: map[string]int{}, change: make(chan struct{}, 1)}
}

func (o *observer) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-o.in:
			o.mu.Lock()
			o.count[f.ID]++
			if o.count[f.ID] == 1 {
				o.first[f.ID] = f.At
				if o.want[f.ID] {
					o.got++
				}
			}
			o.mu.Unlock()
			select {
			case o.change <- struct{}{}:
			default:
			}
		}
	}
}

func (o *observer) expect(ts []Task) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.want = make(map[string]bool, len(ts))
	o.got = 0
	for _, t := range ts {
		o.want[t.ID] = true
		if o.count[t.ID] > 0 {
			o.got++
		}
	}
}

// wait returns when every expected task fired, or at deadline.
func (o *observer) wait(ctx context.Context, deadline time.Time) {
	for {
		o.mu.Lock()
		done := o.got >= len(o.want)
		o.mu.Unlock()
		if done {
			return
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-o.change:
		case <-time.After(wait):
		}
	}
}

func (o *observer) phase(ts []Task) *Phase {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := &Phase{}
	var late []float64
	var due []time.Time
	var firstDue, lastFire time.Time
	for i, t := range ts {
		if i == 0 || t.Due.Before(firstDue) {
			firstDue = t.Due
		}
		n := o.count[t.ID]
		if n == 0 {
			p.Missing++
			continue
		}
		p.Fired++
		p.Duplicates += n - 1
		at := o.first[t.ID]
		if at.After(lastFire) {
			lastFire = at
		}
		ms := float64(at.Sub(t.Due)) / float64(time.Millisecond)
		if ms < 0 {
			p.Early++
			p.MaxEarlyMs = max(p.MaxEarlyMs, -ms)
		}
		late = append(late, ms)
		due = append(due, t.Due)
	}
	if len(late) == 0 {
		return p
	}
	p.Timeline = timeline(firstDue, due, late)
	slices.Sort(late)
	p.P50Ms, p.P90Ms, p.P99Ms, p.MaxMs = quantile(late, 0.5), quantile(late, 0.9), quantile(late, 0.99), late[len(late)-1]
	if span := lastFire.Sub(firstDue); span > 0 {
		p.FirePerSec = float64(p.Fired) / span.Seconds()
	}
	step := max(1, len(late)/2000)
	for i := 0; i < len(late); i += step {
		p.Sample = append(p.Sample, late[i])
	}
	return p
}

func (o *observer) firstAfter(ts []Task, t time.Time) (time.Time, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var best time.Time
	for _, task := range ts {
		if at, ok := o.first[task.ID]; ok && at.After(t) && (best.IsZero() || at.Before(best)) {
			best = at
		}
	}
	return best, !best.IsZero()
}

// span is the first and the last first fire of ts, and how many of ts fired.
func (o *observer) span(ts []Task) (first, last time.Time, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, t := range ts {
		at, ok := o.first[t.ID]
		if !ok {
			continue
		}
		n++
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	return first, last, n
}

// prefire fires w.Prefire follow-ups before a steady phase (their ids
// start with phase) and returns what they measured (nil when w.Prefire is
// 0).
func prefire(ctx context.Context, s Subject, obs *watcher, w Workload, rng *rand.Rand, phase string, log interface{ Info(string, ...any) }) (*Phase, error) {
	if w.Prefire <= 0 {
		return nil, nil
	}
	ww := w
	ww.N, ww.Users, ww.Window, ww.Lead = w.Prefire, max(w.Prefire/2, 1), 2*time.Second, 3*time.Second
	log.Info("first fires", "n", ww.N)
	p, err := runPhase(ctx, s, obs, ww, tasks(rng, phase, ww, ww.Window), log)
	if err != nil {
		return nil, fmt.Errorf("first fires: %w", err)
	}
	p.Sample, p.Timeline = nil, nil
	return p, nil
}

// refire kills s (SIGKILL), starts it again on the same topics and fires
// w.Prefire follow-ups once more (their lead, 3 s, covers the restart).
func refire(ctx context.Context, s Subject, obs *watcher, w Workload, rng *rand.Rand, log interface{ Info(string, ...any) }) (*Phase, error) {
	log.Info("kill -9 and restart before the steady phase")
	if _, err := killAndRestart(ctx, s.System); err != nil {
		return nil, fmt.Errorf("before the steady phase: %w", err)
	}
	p, err := prefire(ctx, s, obs, w, rng, "r", log)
	if err != nil {
		return nil, fmt.Errorf("after the restart: %w", err)
	}
	return p, nil
}

// killAndRestart kills s as kill -9 would and starts it again at once; it
// returns when the restart began.
func killAndRestart(ctx context.Context, s System) (time.Time, error) {
	if err := s.Crash(); err != nil {
		return time.Time{}, fmt.Errorf("kill: %w", err)
	}
	restart := time.Now()
	if err := s.Recover(ctx); err != nil {
		return restart, fmt.Errorf("restart: %w", err)
	}
	return restart, nil
}
