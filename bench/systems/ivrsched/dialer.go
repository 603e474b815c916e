package ivrsched

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/bench/harness"
	"github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/topology"
)

// DialerPhase measures the dialer alone: `ivrsched dialer` with the webhook
// provider pointed at an HTTP endpoint of the benchmark's that takes a
// given latency per call (no calls-per-second cap). Calls are produced to
// ivr-calls as fast as the producer goes; a call is placed when its result
// is on ivr-results.
type DialerPhase struct {
	Calls     int             // calls per run
	Latencies []time.Duration // of the provider, one run each per repetition
	// Repeat is how many times each latency is run (0 or 1: once), the
	// latencies in a rotated order each time; the table shows each
	// latency's median and min–max.
	Repeat int
	// Args are more flags of the dialer, e.g. --max-in-flight 500.
	Args []string
	// Bin is an ivrsched binary to measure instead of this checkout's (an
	// older version, for a before-and-after).
	Bin string
	// Broker, if set, is measured too: its CPU and the records written.
	Broker harness.Backend
}

// DialerResult is one run of the dialer phase.
type DialerResult struct {
	LatencyMs    float64 `json:"provider_latency_ms"`
	Repetition   int     `json:"repetition"`
	Calls        int     `json:"calls"`
	Placed       int     `json:"placed"`
	PlacedPerSec float64 `json:"placed_per_sec"` // placed / (last result - first call produced)
	// From the call's production to ivr-calls to its result on ivr-results.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	// Requests the provider received (more than Calls only when some were
	// sent again).
	Requests int `json:"provider_requests"`
	// CPU seconds of the dialer process per 1,000 calls: what the machine's
	// other load does not change as much as it changes the rate.
	CPUPer1000 float64 `json:"dialer_cpu_seconds_per_1000"`
	// The broker's CPU seconds per 1,000 calls, and records per call (all
	// topics: the calls themselves, the dialer's table, loop and results).
	BrokerCPUPer1000 float64  `json:"broker_cpu_seconds_per_1000,omitempty"`
	RecordsPerCall   float64  `json:"broker_records_per_call,omitempty"`
	Args             []string `json:"args,omitempty"`
	Error            string   `json:"error,omitempty"`
}

// RunDialer runs the phase: each latency once per repetition.
func RunDialer(ctx context.Context, env harness.Env, ph DialerPhase) []DialerResult {
	var out []DialerResult
	for _, run := range dialerRuns(ph.Latencies, ph.Repeat) {
		lat := ph.Latencies[run.latency]
		r, err := runDialerOnce(ctx, env, ph, lat, fmt.Sprintf("dialer-r%d-%d-%dms", run.rep, run.latency, lat.Milliseconds()))
		r.Repetition = run.rep
		if err != nil {
			r.Error = err.Error()
			env.Log.Error("dialer phase", "latency", lat, "repetition", run.rep, "err", err)
		}
		out = append(out, r)
		if ctx.Err() != nil {
			break
		}
	}
	return out
}

// dialerRun is one run of the phase: the index of its latency and its
// repetition (from 1).
type dialerRun struct{ latency, rep int }

// dialerRuns orders the runs: every latency once per repetition, in the
// order of harness.Rotated, as the systems run.
func dialerRuns(latencies []time.Duration, repeat int) []dialerRun {
	idx := make([]int, len(latencies))
	for i := range idx {
		idx[i] = i
	}
	var out []dialerRun
	for rep := range max(repeat, 1) {
		for _, i := range harness.Rotated(idx, rep) {
			out = append(out, dialerRun{latency: i, rep: rep + 1})
		}
	}
	return out
}

// endpoint is the provider: it answers each POST after its latency.
type endpoint struct {
	srv      *http.Server
	url      string
	mu       sync.Mutex
	requests int
}

func startEndpoint(latency time.Duration) (*endpoint, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &endpoint{url: "http://" + ln.Addr().String() + "/calls"}
	e.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		e.mu.Lock()
		e.requests++
		e.mu.Unlock()
		if latency > 0 {
			select {
			case <-time.After(latency):
			case <-r.Context().Done():
				return
			}
		}
		w.Write([]byte(`{}`)) // placed
	})}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

func runDialerOnce(ctx context.Context, env harness.Env, ph DialerPhase, latency time.Duration, name string) (DialerResult, error) {
	res := DialerResult{LatencyMs: float64(latency.Microseconds()) / 1000, Calls: ph.Calls, Args: ph.Args}
	bin := ph.Bin
	if bin == "" {
		var err error
		if bin, err = Build(ctx, env.WorkDir); err != nil {
			return res, err
		}
	}
	ep, err := startEndpoint(latency)
	if err != nil {
		return res, err
	}
	defer ep.srv.Close()
	pfx := "ivrbench-" + name + "-"
	topics := topology.NewTopics(pfx)
	args := append([]string{"dialer", "--brokers", env.KafkaBrokers, "--topic-prefix", pfx, "--partitions", fmt.Sprint(env.Partitions),
		"--data-dir", filepath.Join(env.WorkDir, name), "--log-level", "warn", "--provider", "webhook", "--webhook-url", ep.url}, ph.Args...)
	logPath := filepath.Join(env.WorkDir, name+".log")
	dp, err := harness.StartProcess(Command(bin, args...), logPath)
	if err != nil {
		return res, err
	}
	defer func() {
		if err := dp.Stop(30 * time.Second); err != nil {
			env.Log.Warn("dialer stop", "err", err)
		}
	}()
	s := &System{name: name, topics: topics, broker: env.KafkaBrokers, env: env, procs: []*proc{{args: args, p: dp}}}
	if err := s.awaitTopics(ctx); err != nil {
		return res, err
	}

	octx, stop := context.WithCancel(ctx)
	defer stop()
	results := make(chan harness.Fire, 4096)
	go func() {
		// A topic just created may have no leader yet: observe again (from
		// the start; a call's first result counts).
		for octx.Err() == nil {
			err := harness.ObserveTopic(octx, []string{env.KafkaBrokers}, string(topics.Results), results, func(m *sarama.ConsumerMessage) (harness.Fire, bool) {
				var r ivrschedpb.CallResult
				if proto.Unmarshal(m.Value, &r) != nil {
					return harness.Fire{}, false
				}
				return harness.Fire{ID: r.GetCallId()}, true
			})
			if err == nil || octx.Err() != nil {
				return
			}
			env.Log.Warn("observe results again", "err", err)
			select {
			case <-octx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	p, err := sarama.NewAsyncProducer([]string{env.KafkaBrokers}, config())
	if err != nil {
		return res, err
	}
	defer p.AsyncClose()
	go func() {
		for range p.Successes() {
		}
	}()
	go func() {
		for e := range p.Errors() {
			env.Log.Error("produce call", "err", e.Err)
		}
	}()
	send := func(id, user string) (time.Time, error) {
		now := time.Now()
		c := &ivrschedpb.IVRCall{CallId: id, UserId: user, TaskId: "t", Phone: "+14155550100", Attempt: 1,
			DueAt: timestamppb.New(now), FiredAt: timestamppb.New(now), Action: &ivrschedpb.Action{IvrScript: "bench"}}
		b, err := proto.Marshal(c)
		if err != nil {
			return now, err
		}
		select {
		case p.Input() <- &sarama.ProducerMessage{Topic: string(topics.Calls), Key: sarama.StringEncoder(user), Value: sarama.ByteEncoder(b)}:
			return now, nil
		case <-ctx.Done():
			return now, ctx.Err()
		}
	}
	// One call first: the dialer is up and its partitions are restored.
	if _, err := send("warm-up", "warm-up"); err != nil {
		return res, err
	}
	if err := awaitResults(ctx, results, map[string]time.Time{"warm-up": {}}, 60*time.Second, nil); err != nil {
		return res, fmt.Errorf("warm-up call: %w; the dialer's log ends:\n%s", err, harness.Tail(logPath, 3000))
	}
	ep.mu.Lock()
	ep.requests = 0
	ep.mu.Unlock()

	sent := make(map[string]time.Time, ph.Calls)
	cpu0 := harness.CPUTime(dp.PID())
	var broker0 harness.Counters
	if ph.Broker != nil {
		if broker0, err = ph.Broker.Counters(ctx); err != nil {
			return res, err
		}
	}
	start := time.Now()
	for i := range ph.Calls {
		id := fmt.Sprintf("c-%d", i)
		at, err := send(id, fmt.Sprintf("user-%d", i%max(ph.Calls/2, 1)))
		if err != nil {
			return res, err
		}
		sent[id] = at
	}
	var lat []time.Duration
	var last time.Time
	err = awaitResults(ctx, results, sent, 10*time.Minute, func(id string, at time.Time) {
		lat = append(lat, at.Sub(sent[id]))
		last = at
	})
	res.Placed = len(lat)
	res.CPUPer1000 = (harness.CPUTime(dp.PID()) - cpu0).Seconds() * 1000 / float64(max(len(lat), 1))
	if ph.Broker != nil && err == nil {
		// The last table writes are committed with the offsets of the
		// calls and of the loop (an older dialer has no loop).
		for _, topic := range []string{string(topics.Calls), string(topics.DialerLoop())} {
			if topic == string(topics.DialerLoop()) && !s.hasTopic(topic) {
				continue
			}
			if err := s.committed(ctx, string(topics.Dialer), topic); err != nil {
				return res, err
			}
		}
		b, berr := ph.Broker.Counters(ctx)
		if berr != nil {
			return res, berr
		}
		d := b.Sub(broker0)
		res.BrokerCPUPer1000 = d.CPU.Seconds() * 1000 / float64(ph.Calls)
		res.RecordsPerCall = float64(d.Messages) / float64(ph.Calls)
	}
	ep.mu.Lock()
	res.Requests = ep.requests
	ep.mu.Unlock()
	if len(lat) > 0 {
		slices.Sort(lat)
		q := func(f float64) float64 {
			return float64(lat[min(len(lat)-1, int(f*float64(len(lat))))].Microseconds()) / 1000
		}
		res.P50Ms, res.P99Ms, res.MaxMs = q(0.5), q(0.99), q(1)
		res.PlacedPerSec = float64(len(lat)) / last.Sub(start).Seconds()
	}
	env.Log.Info("dialer phase", "latency", latency, "placed", res.Placed, "per_s", int(res.PlacedPerSec), "p99_ms", res.P99Ms)
	return res, err
}

// awaitResults waits until every call of want has a result (the first
// counts), calling seen for each.
func awaitResults(ctx context.Context, results <-chan harness.Fire, want map[string]time.Time, within time.Duration, seen func(id string, at time.Time)) error {
	got := make(map[string]bool, len(want))
	timeout := time.After(within)
	for len(got) < len(want) {
		select {
		case f := <-results:
			if _, ok := want[f.ID]; !ok || got[f.ID] {
				continue
			}
			got[f.ID] = true
			if seen != nil {
				seen(f.ID, f.At)
			}
		case <-timeout:
			return fmt.Errorf("%d of %d calls placed within %v", len(got), len(want), within)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// ErrNoDialerPhase is returned by ParseLatencies for an empty list.
var ErrNoDialerPhase = errors.New("no provider latencies")

// ParseLatencies reads a comma-separated list of durations, e.g. 0ms,50ms,300ms.
func ParseLatencies(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("latency %q: want a duration >= 0 like 300ms", f)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, ErrNoDialerPhase
	}
	return out, nil
}

// DialerMarkdown writes the phase's results as a table: a row per
// latency, in the order given, with the median over its runs and the
// min–max when it ran more than once (runs that failed are counted apart
// and left out of the figures).
func DialerMarkdown(w io.Writer, rs []DialerResult) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "\nDialer alone (`ivrsched dialer %s`, webhook provider, no calls-per-second cap), calls produced to ivr-calls at once; a call is placed when its result is on ivr-results; medians over the runs, with min–max in brackets:\n\n", strings.Join(rs[0].Args, " "))
	fmt.Fprintln(w, "| provider latency ms | runs | calls | placed | placed /s | p50 ms | p99 ms | max ms | provider requests | dialer CPU s / 1000 | broker CPU s / 1000 | broker records / call |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, g := range byLatency(rs) {
		var ok []DialerResult
		var errs []string
		for _, r := range g {
			if r.Error != "" {
				// One cell: a warm-up's error carries the dialer's log.
				errs = append(errs, strings.NewReplacer("|", "/", "\n", " ").Replace(r.Error))
				continue
			}
			ok = append(ok, r)
		}
		runs := fmt.Sprint(len(g))
		if len(errs) > 0 {
			runs = fmt.Sprintf("%d (%d failed: %s)", len(g), len(errs), strings.Join(errs, "; "))
		}
		if len(ok) == 0 {
			fmt.Fprintf(w, "| %.0f | %s | %d | - | - | - | - | - | - | - | - | - |\n", g[0].LatencyMs, runs, g[0].Calls)
			continue
		}
		of := func(f func(DialerResult) float64) harness.Spread {
			vs := make([]float64, len(ok))
			for i, r := range ok {
				vs[i] = f(r)
			}
			return harness.SpreadOf(vs)
		}
		fmt.Fprintf(w, "| %.0f | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", g[0].LatencyMs, runs, g[0].Calls,
			of(func(r DialerResult) float64 { return float64(r.Placed) }).Format("%.0f"),
			of(func(r DialerResult) float64 { return r.PlacedPerSec }).Format("%.0f"),
			of(func(r DialerResult) float64 { return r.P50Ms }).Format("%.0f"),
			of(func(r DialerResult) float64 { return r.P99Ms }).Format("%.0f"),
			of(func(r DialerResult) float64 { return r.MaxMs }).Format("%.0f"),
			of(func(r DialerResult) float64 { return float64(r.Requests) }).Format("%.0f"),
			of(func(r DialerResult) float64 { return r.CPUPer1000 }).Format("%.2f"),
			of(func(r DialerResult) float64 { return r.BrokerCPUPer1000 }).Format("%.2f"),
			of(func(r DialerResult) float64 { return r.RecordsPerCall }).Format("%.2f"))
	}
}

// byLatency groups the runs by provider latency, in the order each latency
// first ran.
func byLatency(rs []DialerResult) [][]DialerResult {
	var out [][]DialerResult
	at := map[float64]int{}
	for _, r := range rs {
		i, ok := at[r.LatencyMs]
		if !ok {
			i = len(out)
			at[r.LatencyMs] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], r)
	}
	return out
}

// hasTopic says whether the broker has topic.
func (s *System) hasTopic(topic string) bool {
	c, err := sarama.NewClient([]string{s.broker}, config())
	if err != nil {
		return false
	}
	defer c.Close()
	all, err := c.Topics()
	return err == nil && slices.Contains(all, topic)
}
