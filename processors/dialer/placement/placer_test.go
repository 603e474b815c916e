package placement

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/localstore"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const (
	table = "ivr-dialer-table"
	calls = "ivr-calls"
	loop  = "ivr-dialer-loop"
	evs   = "followup-events"
)

// answers records what the placer stored.
type answers struct {
	mu    sync.Mutex
	got   []*pb.CallStatus
	fail  int // fail this many emits first
	added *sync.Cond
}

func (a *answers) Emit(key string, msg any) (*goka.Promise, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail > 0 {
		a.fail--
		return nil, errors.New("broker down")
	}
	st := msg.(*pb.CallStatus)
	if key != st.GetUserId() {
		return nil, fmt.Errorf("key %q for user %q", key, st.GetUserId())
	}
	a.got = append(a.got, st)
	if a.added != nil {
		a.added.Broadcast()
	}
	_, finish := goka.NewPromiseWithFinisher()
	return finish(nil, nil), nil
}

// wait returns once n answers are stored.
func (a *answers) wait(n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.added == nil {
		a.added = sync.NewCond(&a.mu)
	}
	for len(a.got) < n {
		a.added.Wait()
	}
}

func (a *answers) all() []*pb.CallStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

// provider answers each call with what answer says (nil: placed, final),
// after gate lets it go if gate is set.
type fakeProvider struct {
	entered chan string // if set, told of each request
	mu      sync.Mutex
	seen    []string
	now     int // calls under way
	most    int
	gate    chan struct{}
	answer  func(c *pb.IVRCall, n int) (provider.Result, error) // n: requests for this call so far
	counts  map[string]int
}

func (p *fakeProvider) Place(ctx context.Context, c *pb.IVRCall) (provider.Result, error) {
	p.mu.Lock()
	p.seen = append(p.seen, c.GetCallId())
	if p.counts == nil {
		p.counts = map[string]int{}
	}
	p.counts[c.GetCallId()]++
	n := p.counts[c.GetCallId()]
	p.now++
	p.most = max(p.most, p.now)
	gate, answer := p.gate, p.answer
	p.mu.Unlock()
	if p.entered != nil {
		p.entered <- c.GetCallId()
	}
	defer func() { p.mu.Lock(); p.now--; p.mu.Unlock() }()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return provider.Result{}, ctx.Err()
		}
	}
	if answer != nil {
		return answer(c, n)
	}
	return provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED, Final: true}, nil
}

type fixture struct {
	p     *Placer
	ans   *answers
	prov  *fakeProvider
	clk   *clock.Fake
	stop  func()
	build storage.Builder
	next  map[int32]int64 // the next ivr-calls offset of each partition
}

func newFixture(t testing.TB, cfg Config) *fixture {
	t.Helper()
	f := &fixture{ans: &answers{}, prov: &fakeProvider{}, clk: clock.NewFake(t0), next: map[int32]int64{}}
	if cfg.Provider == nil {
		cfg.Provider = f.prov
	}
	cfg.Results, cfg.Table, cfg.Calls, cfg.Events, cfg.Loop, cfg.Clock = f.ans, table, calls, evs, loop, f.clk
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	f.build = p.StorageBuilder(storage.MemoryBuilder())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Run(ctx); close(done) }()
	f.stop = func() { cancel(); <-done }
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Millisecond): // not a wait for an event: the drain's timer, if it runs
			f.clk.Advance(time.Hour)
			<-done
		}
	})
	return f
}

// open opens and recovers a partition of the table.
func (f *fixture) open(t testing.TB, part int32, values map[string]*pb.DialerState) storage.Storage {
	t.Helper()
	raw := make(map[string][]byte, len(values))
	for user, v := range values {
		raw[user] = enc(t, v)
	}
	return f.openRaw(t, part, raw)
}

// openRaw opens partition part of the table with the values given as
// Goka's restore would write them.
func (f *fixture) openRaw(t testing.TB, part int32, values map[string][]byte) storage.Storage {
	t.Helper()
	st, err := f.build(table, part)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	for user, v := range values { // Goka's restore
		if err := st.Set(user, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	return st
}

func enc(t testing.TB, st *pb.DialerState) []byte {
	t.Helper()
	b, err := proto.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func call(user, id string) *pb.IVRCall {
	return &pb.IVRCall{CallId: id, UserId: user, TaskId: "t-" + id, Phone: "+14155550123", Attempt: 1}
}

// record does what the dialer's callback does: Submit each call with the
// next offset of the partition's ivr-calls.
func (f *fixture) record(t *testing.T, _ storage.Storage, part int32, calls ...*pb.IVRCall) {
	t.Helper()
	for _, c := range calls {
		if _, err := f.p.Submit(context.Background(), part, f.next[part], c); err != nil {
			t.Fatal(err)
		}
		f.next[part]++
	}
}

func idle(p *Placer) { <-p.Idle() }

func TestWireReaders(t *testing.T) {
	st := &pb.DialerState{
		Calls:    []*pb.DialRecord{{CallId: "old", Outcome: pb.Outcome_OUTCOME_ANSWERED}},
		InFlight: []*pb.IVRCall{call("u", "a"), call("u", "b")},
	}
	raw, _ := proto.Marshal(st)
	if !HasInFlight(raw) {
		t.Fatal("calls in flight not seen")
	}
	st.InFlight = nil
	raw, _ = proto.Marshal(st)
	if HasInFlight(raw) || HasInFlight(nil) {
		t.Fatal("calls in flight seen where there are none")
	}
}

// At most MaxInFlight calls are placed at a time; all are placed once.
func TestMaxInFlight(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 3})
	f.prov.gate = make(chan struct{})
	f.prov.entered = make(chan string, 10)
	st := f.open(t, 0, nil)
	var calls []*pb.IVRCall
	for i := range 10 {
		calls = append(calls, call(fmt.Sprint("u", i%4), fmt.Sprint("c", i)))
	}
	f.record(t, st, 0, calls...)
	for range 3 {
		<-f.prov.entered
	}
	if q := f.p.Stats.Queued.Load(); q != 7 {
		t.Fatalf("%d queued while 3 are placed, want 7", q)
	}
	close(f.prov.gate)
	idle(f.p)
	if f.prov.most != 3 || len(f.prov.seen) != 10 || len(f.ans.all()) != 10 {
		t.Fatalf("at most %d at a time, %d requests, %d answers", f.prov.most, len(f.prov.seen), len(f.ans.all()))
	}
	for _, a := range f.ans.all() {
		if !a.GetPlacement() || a.GetOutcome() != pb.Outcome_OUTCOME_PLACED || !a.GetFinal() || a.GetRequests() != 1 {
			t.Fatalf("answer %v", a)
		}
	}
}

// 429 and 5xx are sent again after the backoff or a longer Retry-After,
// without holding up other calls; at the deadline the call fails.
func TestRetriesWithinDeadline(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 4, Deadline: 10 * time.Second, MinBackoff: time.Second, MaxBackoff: 4 * time.Second})
	f.p.jitter = func() float64 { return 1 } // waits of the full backoff
	f.prov.answer = func(c *pb.IVRCall, n int) (provider.Result, error) {
		switch c.GetCallId() {
		case "busy-api":
			if n == 1 {
				return provider.Result{}, &provider.RetryableError{Status: 429, RetryAfter: 3 * time.Second, Err: errors.New("too many")}
			}
		case "down":
			return provider.Result{}, &provider.RetryableError{Status: 503, Err: errors.New("down")}
		case "refused":
			return provider.Result{}, errors.New("400 invalid number")
		}
		return provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED, ProviderCallID: "p-" + c.GetCallId()}, nil
	}
	st := f.open(t, 0, nil)
	f.record(t, st, 0, call("a", "busy-api"), call("b", "down"), call("c", "refused"), call("d", "fine"))
	// busy-api waits its Retry-After (3s), down its backoff (1s, 2s, 4s; 4s
	// more would pass the deadline); refused and fine are answered at once.
	f.ans.wait(2)
	f.clk.BlockUntil(2)
	f.clk.Advance(time.Second) // down's 2nd request
	f.clk.BlockUntil(2)
	f.clk.Advance(2 * time.Second) // t=3s: busy-api's 2nd, down's 3rd
	f.clk.BlockUntil(1)
	f.clk.Advance(4 * time.Second) // t=7s: down's 4th; 7s + 4s is past the deadline
	idle(f.p)
	got := map[string]*pb.CallStatus{}
	for _, a := range f.ans.all() {
		got[a.GetCallId()] = a
	}
	if a := got["busy-api"]; a.GetOutcome() != pb.Outcome_OUTCOME_PLACED || a.GetFinal() || a.GetRequests() != 2 || a.GetProviderCallId() != "p-busy-api" {
		t.Errorf("busy-api: %v", a)
	}
	if a := got["down"]; a.GetOutcome() != pb.Outcome_OUTCOME_FAILED || !a.GetFinal() || a.GetRequests() != 4 {
		t.Errorf("down: %v", a)
	}
	if a := got["refused"]; a.GetOutcome() != pb.Outcome_OUTCOME_FAILED || a.GetRequests() != 1 {
		t.Errorf("refused: %v", a)
	}
	if a := got["fine"]; a.GetRequests() != 1 || !a.GetAt().AsTime().Equal(t0) {
		t.Errorf("fine, not held up by the others: %v", a)
	}
	if s := &f.p.Stats; s.TooMany.Load() != 1 || s.ServerErrors.Load() != 4 || s.Requests.Load() != 8 || s.Failed.Load() != 2 {
		t.Errorf("stats: 429 %d, 5xx %d, requests %d, failed %d", s.TooMany.Load(), s.ServerErrors.Load(), s.Requests.Load(), s.Failed.Load())
	}
}

// The calls per second are the owned partitions' share of the deployment's,
// re-split as partitions come and go; requests keep to it.
func TestCallsPerSecondShare(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 10, CPS: 8, Partitions: 4})
	if f.p.Rate() != 0 {
		t.Fatalf("rate %v with no partition", f.p.Rate())
	}
	st0 := f.open(t, 0, nil)
	if f.p.Rate() != 2 {
		t.Fatalf("rate %v with 1 of 4 partitions, want 2", f.p.Rate())
	}
	st1 := f.open(t, 1, nil)
	if f.p.Rate() != 4 {
		t.Fatalf("rate %v with 2 of 4, want 4", f.p.Rate())
	}
	if err := st1.Close(); err != nil {
		t.Fatal(err)
	}
	if f.p.Rate() != 2 {
		t.Fatalf("rate %v after giving one up, want 2", f.p.Rate())
	}
	// At 2/s: the bucket's one saved token, then one every 500 ms.
	var calls []*pb.IVRCall
	for i := range 5 {
		calls = append(calls, call("u", fmt.Sprint("c", i)))
	}
	f.record(t, st0, 0, calls...)
	f.ans.wait(1)
	for i := 1; i <= 4; i++ {
		f.clk.BlockUntil(1)
		f.clk.Advance(500 * time.Millisecond)
		f.ans.wait(i + 1)
	}
	idle(f.p)
	var ats []time.Duration
	for _, a := range f.ans.all() {
		ats = append(ats, a.GetAt().AsTime().Sub(t0))
	}
	slices.Sort(ats)
	if want := []time.Duration{0, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond, 2 * time.Second}; !slices.Equal(ats, want) {
		t.Fatalf("placed at %v, want %v", ats, want)
	}
}

// A call that is no longer held when its turn comes is not placed: its
// first status recorded already, its user forgotten, or its partition gone.
func TestOnlyCallsStillInFlightArePlaced(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 1})
	f.prov.gate = make(chan struct{})
	st := f.open(t, 0, nil)
	f.record(t, st, 0, call("a", "first"), call("b", "answered"), call("c", "forgotten"), call("d", "kept"))
	if c := f.p.Record(0, "b", "answered", 7); c.GetTaskId() != "t-answered" {
		t.Fatalf("recorded %v", c)
	}
	if c := f.p.Record(0, "b", "answered", 8); c != nil {
		t.Fatalf("recorded twice: %v", c)
	}
	f.p.Forget(0, "c", t0, 0)
	f.prov.gate <- struct{}{} // first
	f.prov.gate <- struct{}{} // kept
	idle(f.p)
	if !slices.Equal(f.prov.seen, []string{"first", "kept"}) || f.p.Stats.Skipped.Load() != 2 {
		t.Fatalf("placed %v, skipped %d", f.prov.seen, f.p.Stats.Skipped.Load())
	}

	// The partition goes: the call under way is answered (its answer goes
	// to the loop, for the next owner), the queued one is not placed.
	f.prov.entered = make(chan string, 1)
	f.record(t, st, 0, call("e", "under-way"), call("f", "queued"))
	<-f.prov.entered
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	close(f.prov.gate)
	idle(f.p)
	if got := f.prov.Seen(); !slices.Equal(got, []string{"first", "kept", "under-way"}) || len(f.ans.all()) != 3 {
		t.Fatalf("placed %v, %d answers", got, len(f.ans.all()))
	}
	if _, err := f.p.Submit(context.Background(), 0, 9, call("g", "late")); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("submit to a partition given up: %v", err)
	}
}

// A partition that comes places again the calls its table lists in flight,
// with their call ids. With a marking local store it reads only the users
// that have some.
func TestPartitionPlacesItsCallsInFlightAgain(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, Config{MaxInFlight: 4})
	stores := localstore.New(dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	stores.Mark(HasInFlight)
	f.build = f.p.StorageBuilder(stores.Builder())
	values := map[string]*pb.DialerState{
		"u1": {InFlight: []*pb.IVRCall{call("u1", "a"), call("u1", "b")}, Calls: []*pb.DialRecord{{CallId: "done"}}},
		"u2": {Calls: []*pb.DialRecord{{CallId: "done-2"}}},
		"u3": {InFlight: []*pb.IVRCall{call("", "c")}}, // the user id comes from the key
	}
	for i := range 50 {
		values[fmt.Sprint("idle-", i)] = &pb.DialerState{Calls: []*pb.DialRecord{{CallId: fmt.Sprint("x", i)}}}
	}
	var logs syncBuffer
	f.p.cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	st := f.open(t, 0, values)
	defer st.Close()
	idle(f.p)
	seen := slices.Sorted(slices.Values(f.prov.seen))
	if !slices.Equal(seen, []string{"a", "b", "c"}) || f.p.Stats.Resubmitted.Load() != 3 {
		t.Fatalf("placed again %v, resubmitted %d", seen, f.p.Stats.Resubmitted.Load())
	}
	if got := logs.String(); !strings.Contains(got, "calls_in_flight=3") || !strings.Contains(got, "values_read=2") {
		t.Fatalf("log: %s", got)
	}
	for _, a := range f.ans.all() {
		if a.GetCallId() == "c" && a.GetUserId() != "u3" {
			t.Fatalf("answer %v", a)
		}
	}
}

// A value that lists calls in flight but does not decode (written by an
// earlier version, then damaged) names no call to place: the partition
// comes all the same, places the calls the other values list, and counts
// and logs the value, which it keeps. Failing the partition would fail
// it at every attempt.
func TestUnreadableValueInFlightDoesNotStopThePartition(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 4})
	stores := localstore.New(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	stores.Mark(HasInFlight)
	f.build = f.p.StorageBuilder(stores.Builder())
	damaged := []byte{0x12, 0x03, 0xff, 0xff, 0xff} // in_flight: an IVRCall whose first tag is cut off
	if !HasInFlight(damaged) || proto.Unmarshal(damaged, &pb.DialerState{}) == nil {
		t.Fatal("the damaged value must be marked and not decode")
	}
	var logs syncBuffer
	f.p.cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	st := f.openRaw(t, 0, map[string][]byte{
		"bad": damaged,
		"u1":  enc(t, &pb.DialerState{InFlight: []*pb.IVRCall{call("u1", "a")}}),
	})
	defer st.Close()
	idle(f.p)
	if seen := f.prov.Seen(); !slices.Equal(seen, []string{"a"}) || f.p.Stats.Resubmitted.Load() != 1 || f.p.Stats.Unreadable.Load() != 1 {
		t.Fatalf("placed again %v, resubmitted %d, unreadable %d", seen, f.p.Stats.Resubmitted.Load(), f.p.Stats.Unreadable.Load())
	}
	if got := logs.String(); !strings.Contains(got, "values_unreadable=1") || !strings.Contains(got, "user=bad") {
		t.Fatalf("log: %s", got)
	}
	if v, err := st.Get("bad"); err != nil || !bytes.Equal(v, damaged) {
		t.Fatalf("the damaged value is %x (%v), want it kept", v, err)
	}
}

// An answer that Kafka did not take is sent again.
func TestAnswerIsStoredDespiteErrors(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 1})
	f.ans.fail = 2
	st := f.open(t, 0, nil)
	f.record(t, st, 0, call("u", "c"))
	f.clk.BlockUntil(1)
	f.clk.Advance(100 * time.Millisecond)
	f.clk.BlockUntil(1)
	f.clk.Advance(200 * time.Millisecond)
	idle(f.p)
	if got := f.ans.all(); len(got) != 1 || len(f.prov.seen) != 1 {
		t.Fatalf("answers %v, requests %v", got, f.prov.seen)
	}
}

// Stopping lets the requests under way finish for Drain; a request cut
// off stores no answer (the call stays in flight for the next start).
func TestStopDrains(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 2, Drain: 5 * time.Second})
	f.prov.gate = make(chan struct{})
	f.prov.entered = make(chan string, 2)
	st := f.open(t, 0, nil)
	f.record(t, st, 0, call("u", "finishes"), call("v", "cut"))
	<-f.prov.entered
	<-f.prov.entered
	stopped := make(chan struct{})
	go func() { f.stop(); close(stopped) }()
	f.prov.gate <- struct{}{} // one request finishes during the drain
	f.clk.BlockUntil(1)
	f.clk.Advance(5 * time.Second)
	<-stopped
	if got := f.ans.all(); len(got) != 1 {
		t.Fatalf("answers %v, want the one that finished", got)
	}
}

func (p *fakeProvider) Seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}

// A call whose partition goes while it waits for its token of the calls
// per second is not sent when the token comes: the partition's next owner
// places it.
func TestCallWaitingForItsTokenIsNotSentAfterItsPartitionWent(t *testing.T) {
	f := newFixture(t, Config{MaxInFlight: 2, CPS: 1, Partitions: 1})
	st := f.open(t, 0, nil)
	f.record(t, st, 0, call("u", "first"), call("u", "waits"))
	f.ans.wait(1) // one took the saved token (either: two workers); the other waits for the next
	f.clk.BlockUntil(1)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = f.open(t, 0, nil) // the partition comes back (a rebalance), and its share
	defer st.Close()
	f.clk.Advance(time.Second)
	idle(f.p)
	if got := f.prov.Seen(); len(got) != 1 || f.p.Stats.Skipped.Load() != 1 {
		t.Fatalf("placed %v, skipped %d", got, f.p.Stats.Skipped.Load())
	}
}
