// Package systemtest runs ivrsched's binary against Apache Kafka: the full
// pipeline, kill -9 crashes, rebalances, a rolling restart, a broker
// restart, a three-broker cluster that loses a broker, and records from
// other clients. The brokers are started by internal/kafkatest (Apache Kafka
// fetched with Maven), or taken from KAFKA_BROKERS (except for the tests
// that restart or kill brokers).
//
// These tests take minutes; `go test -short` skips them.
package systemtest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/internal/ratelimit"
	"github.com/ivrsched/ivrsched/topology"
)

// The suppression key of every process the tests start (unless the
// environment sets one).
const (
	suppressionKeyEnv    = "IVRSCHED_SUPPRESSION_KEY"
	systemSuppressionKey = "systemtest-suppression-key-0123456789abcdef"
)

// binary is the ivrsched binary built once for the whole run.
var binary string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// Every role needs the do-not-call list's key; the processes inherit it.
	if os.Getenv(suppressionKeyEnv) == "" {
		os.Setenv(suppressionKeyEnv, systemSuppressionKey)
	}
	dir, err := os.MkdirTemp("", "ivrsched-systemtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "ivrsched")
	build := exec.Command("go", "build", "-o", binary, "github.com/ivrsched/ivrsched/cmd/ivrsched")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build ivrsched:", err)
		return 1
	}
	return kafkatest.Main(m)
}

// needKafka skips in -short mode and returns the shared broker.
func needKafka(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("system test against Apache Kafka; skipped with -short")
	}
	return kafkatest.ForTest(t)
}

// prefix gives each test its own topics and groups on the shared broker.
func prefix(t *testing.T) string {
	return strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")) + "-"
}

// proc is one ivrsched process.
type proc struct {
	t    *testing.T
	name string
	args []string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// start runs ivrsched with args; its output goes to a log file that is
// printed when the test fails.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, args: args, log: filepath.Join(t.TempDir(), name+".log")}
	p.launch()
	t.Cleanup(func() {
		p.kill()
		b, _ := os.ReadFile(p.log)
		if t.Failed() {
			t.Logf("--- log of %s (last 6000 bytes) ---\n%s", name, tail(b, 6000))
		}
		// SYSTEMTEST_LOGS=DIR keeps every process's whole log.
		if dir := os.Getenv("SYSTEMTEST_LOGS"); dir != "" {
			_ = os.WriteFile(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log"), b, 0o644)
		}
	})
	return p
}

func (p *proc) launch() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	fmt.Fprintf(f, "=== start %s %s\n", p.name, strings.Join(p.args, " "))
	p.cmd = exec.Command(binary, p.args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.done = make(chan struct{})
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
}

// kill9 kills the process with SIGKILL, as a crash would.
func (p *proc) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// stop sends SIGTERM and waits for a graceful exit.
func (p *proc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(60 * time.Second):
		p.kill9()
		return fmt.Errorf("%s did not stop within 60s of SIGTERM", p.name)
	}
}

func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		p.kill9()
	}
}

func (p *proc) restart() { p.launch() }

// exited reports a process that ended by itself.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v", p.name, p.err)
	default:
		return nil
	}
}

// awaitReady waits until the process has logged that it is ready (every
// role's processor recovered its tables and runs) n times, once per start:
// awaitReady(2) after the first restart.
func (p *proc) awaitReady(n int, within time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(p.log)
		if err != nil {
			p.t.Fatal(err)
		}
		if bytes.Count(b, []byte("msg=ready")) >= n {
			return
		}
		if err := p.exited(); err != nil {
			p.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s not ready (start %d) within %v", p.name, n, within)
		}
		<-tick.C
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// request is one call request the provider received.
type request struct {
	call *pb.IVRCall
	at   time.Time
	key  string // Idempotency-Key header
}

// provider is the webhook endpoint the dialer calls: it records every raw
// request and honours the idempotency key. With a latency it takes that
// long to answer; with a calls-per-second limit it answers 429 to a
// request above it (a token bucket), and records it apart.
type provider struct {
	srv     *httptest.Server
	latency time.Duration
	limit   *ratelimit.Bucket
	mu      sync.Mutex
	reqs    []request
	tooMany []time.Time // when requests got 429
	news    chan struct{}
	// answer, if set, is the body of the answer to a call (default: answered,
	// final); it is given the requests taken before this one.
	answer func(c *pb.IVRCall, before []request) string
}

func newProvider(t *testing.T) *provider { return newPacedProvider(t, 0, 0, 0) }

// newPacedProvider is a provider that takes latency per call and allows cps
// calls per second with a burst of burst (0: no limit).
func newPacedProvider(t *testing.T, latency time.Duration, cps float64, burst int) *provider {
	p := &provider{news: make(chan struct{}, 1), latency: latency}
	if cps > 0 {
		p.limit = ratelimit.New(clock.Real{}, cps, burst)
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, _ := io.ReadAll(r.Body)
		c := &pb.IVRCall{}
		if err := protojson.Unmarshal(body, c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if p.limit != nil && !p.limit.Allow() {
			p.mu.Lock()
			p.tooMany = append(p.tooMany, at)
			p.mu.Unlock()
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many calls per second", http.StatusTooManyRequests)
			return
		}
		p.mu.Lock()
		answer := `{"outcome":"answered"}`
		if p.answer != nil {
			answer = p.answer(c, p.reqs)
		}
		p.reqs = append(p.reqs, request{call: c, at: at, key: r.Header.Get("Idempotency-Key")})
		p.mu.Unlock()
		select {
		case p.news <- struct{}{}:
		default:
		}
		select { // the provider's own time to place the call
		case <-time.After(p.latency):
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, answer)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// requests is how many requests the provider took (429 answers apart).
func (p *provider) requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

// distinctKeys is how many idempotency keys the provider took.
func (p *provider) distinctKeys() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := map[string]bool{}
	for _, r := range p.reqs {
		keys[r.key] = true
	}
	return len(keys)
}

// refusedTooMany is when requests got 429.
func (p *provider) refusedTooMany() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.tooMany)
}

func (p *provider) url() string { return p.srv.URL + "/calls" }

// followUp identifies one scheduled follow-up.
type followUp struct{ user, task string }

// report is what the provider saw, against what was scheduled.
type report struct {
	placed      int // distinct follow-ups placed (by idempotency key)
	lost        []followUp
	early       []string
	twoCallIDs  int // follow-ups placed under two different call ids
	rawRepeats  int // requests repeating an idempotency key already seen
	badKeys     int // requests whose Idempotency-Key is not the call id
	unexpected  int // calls for follow-ups never scheduled
	lateness    []time.Duration
	firstPlaced map[followUp]time.Time
}

func (p *provider) report(want map[followUp]time.Time) report {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := report{firstPlaced: map[followUp]time.Time{}}
	ids := map[followUp]map[string]bool{}
	seenKey := map[string]bool{}
	for _, q := range p.reqs {
		f := followUp{q.call.GetUserId(), q.call.GetTaskId()}
		if q.key != q.call.GetCallId() {
			r.badKeys++
		}
		if seenKey[q.key] {
			r.rawRepeats++
			continue
		}
		seenKey[q.key] = true
		due, ok := want[f]
		if !ok {
			r.unexpected++
			continue
		}
		if ids[f] == nil {
			ids[f] = map[string]bool{}
		}
		ids[f][q.call.GetCallId()] = true
		if q.at.Before(due) || q.call.GetFiredAt().AsTime().Before(due) || !q.call.GetDueAt().AsTime().Equal(due) {
			r.early = append(r.early, fmt.Sprintf("%v due %v fired %v placed %v", f, due, q.call.GetFiredAt().AsTime(), q.at))
		}
		if _, ok := r.firstPlaced[f]; !ok {
			r.firstPlaced[f] = q.at
			r.lateness = append(r.lateness, q.at.Sub(due))
		}
	}
	for f := range want {
		switch n := len(ids[f]); {
		case n == 0:
			r.lost = append(r.lost, f)
		case n > 1:
			r.twoCallIDs++
		}
	}
	r.placed = len(r.firstPlaced)
	slices.Sort(r.lateness)
	return r
}

// waitAll waits until every wanted follow-up was placed, or the deadline.
func (p *provider) waitAll(t *testing.T, want map[followUp]time.Time, deadline time.Time, procs ...*proc) report {
	t.Helper()
	for {
		r := p.report(want)
		if len(r.lost) == 0 {
			return r
		}
		for _, pr := range procs {
			if err := pr.exited(); err != nil {
				t.Fatalf("%v (placed %d of %d)", err, r.placed, len(want))
			}
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return r
		}
		select {
		case <-p.news:
		case <-time.After(min(wait, time.Second)):
		}
	}
}

func (r report) String() string {
	return fmt.Sprintf("placed %d, lost: %d, early: %d, dialed under two different call ids: %d, raw repeated provider requests: %d, lateness %s",
		r.placed, len(r.lost), len(r.early), r.twoCallIDs, r.rawRepeats, percentiles(r.lateness))
}

// percentiles describes sorted durations: "p50 … p99 … max …".
func percentiles(sorted []time.Duration) string {
	pct := func(q float64) time.Duration {
		if len(sorted) == 0 {
			return 0
		}
		return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
	}
	return fmt.Sprintf("p50 %v p99 %v max %v", pct(0.5), pct(0.99), pct(1))
}

// latenessDue returns, sorted, the lateness of the placed follow-ups due in
// [from, to).
func (r report) latenessDue(want map[followUp]time.Time, from, to time.Time) []time.Duration {
	var ds []time.Duration
	for f, at := range r.firstPlaced {
		if due := want[f]; !due.Before(from) && due.Before(to) {
			ds = append(ds, at.Sub(due))
		}
	}
	slices.Sort(ds)
	return ds
}

// check fails the test unless every follow-up was placed once, never early.
func (r report) check(t *testing.T) {
	t.Helper()
	t.Log(r)
	if len(r.lost) > 0 || len(r.early) > 0 || r.twoCallIDs > 0 || r.unexpected > 0 || r.badKeys > 0 {
		t.Fatalf("lost %d (e.g. %v), early %d (e.g. %v), two call ids %d, unexpected %d, idempotency key != call id %d",
			len(r.lost), first(r.lost), len(r.early), first(r.early), r.twoCallIDs, r.unexpected, r.badKeys)
	}
}

func first[T any](s []T) any {
	if len(s) == 0 {
		return nil
	}
	return s[0]
}

// schedule produces one onboarding command per user with the given follow-ups
// (task → due time) and returns what is expected to fire.
func schedule(t *testing.T, brokers, pfx string, partitions int, plan map[string]map[string]time.Time) map[followUp]time.Time {
	t.Helper()
	return scheduleOn(t, kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: strings.Split(brokers, ","), Partitions: partitions, Replication: 1, FlushFrequency: 5 * time.Millisecond}, pfx, plan)
}

// scheduleOn is schedule through the client settings k (TLS and SASL, say).
func scheduleOn(t *testing.T, k kafkaclient.Kafka, pfx string, plan map[string]map[string]time.Time) map[followUp]time.Time {
	t.Helper()
	want := map[followUp]time.Time{}
	now := timestamppb.Now()
	var recs []keyed
	for user, tasks := range plan {
		ob := &pb.Onboard{Phone: "+14155550100", TimeZone: "America/Chicago"}
		for task, due := range tasks {
			ob.FollowUps = append(ob.FollowUps, &pb.FollowUp{TaskId: task, When: &pb.FollowUp_DueAt{DueAt: timestamppb.New(due)}})
			want[followUp{user, task}] = due.Truncate(time.Nanosecond)
		}
		recs = append(recs, keyed{user, &pb.Command{UserId: user, RequestedAt: now, Command: &pb.Command_Onboard{Onboard: ob}}})
	}
	emitAll(t, k, topology.NewTopics(pfx).Onboarding, new(codec.Command), recs)
	return want
}

// keyed is a record to produce: a key and a message.
type keyed struct {
	key string
	msg any
}

// emitAll produces the records to topic with Goka's emitter (murmur2 keys),
// all acknowledged before it returns.
func emitAll(t *testing.T, k kafkaclient.Kafka, topic goka.Stream, c goka.Codec, recs []keyed) {
	t.Helper()
	em, err := goka.NewEmitter(k.Brokers, topic, c, k.EmitterOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	var failed []keyed
	var lastErr error
	var mu sync.Mutex
	for _, r := range recs {
		prom, err := em.Emit(r.key, r.msg)
		if err != nil {
			t.Fatal(err)
		}
		prom.Then(func(err error) {
			if err != nil {
				mu.Lock()
				failed, lastErr = append(failed, r), err
				mu.Unlock()
			}
		})
	}
	if err := em.Finish(); err != nil {
		t.Fatal(err)
	}
	// A topic a process has just created may not have its partition
	// leaders everywhere yet: produce what failed again, once they do.
	for attempt := 0; len(failed) > 0; attempt++ {
		if attempt == 20 {
			t.Fatalf("%d records not produced to %s: %v", len(failed), topic, lastErr)
		}
		time.Sleep(250 * time.Millisecond) // the broker's metadata has no event to await
		em, err := goka.NewEmitter(k.Brokers, topic, c, k.EmitterOptions()...)
		if err != nil {
			t.Fatal(err)
		}
		retry := failed
		failed = nil
		for _, r := range retry {
			if err := em.EmitSync(r.key, r.msg); err != nil {
				failed, lastErr = append(failed, r), err
			}
		}
		if err := em.Finish(); err != nil {
			t.Fatal(err)
		}
	}
}

// spread plans n users with tasksPer follow-ups each, due uniformly over
// [from, from+over).
func spread(n, tasksPer int, from time.Time, over time.Duration) map[string]map[string]time.Time {
	plan := map[string]map[string]time.Time{}
	total := n * tasksPer
	for i := 0; i < total; i++ {
		user := fmt.Sprintf("user-%05d", i%n)
		if plan[user] == nil {
			plan[user] = map[string]time.Time{}
		}
		// Interleave users and tasks so each user's tasks are spread too.
		due := from.Add(time.Duration(int64(over) * int64((i*7919)%total) / int64(total)))
		plan[user][fmt.Sprintf("task-%d", i/n)] = due
	}
	return plan
}

// roleArgs are the flags every ivrsched process of a test shares. No
// calling policy applies until a test sets one (policy_test.go), so the
// tests place calls at any hour of the day.
func roleArgs(t *testing.T, brokers, pfx string, partitions int, extra ...string) []string {
	return append([]string{"--brokers", brokers, "--topic-prefix", pfx, "--partitions", fmt.Sprint(partitions),
		"--data-dir", t.TempDir(), "--log-level", "info", "--default-policy", "none"}, extra...)
}
