package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
	"github.com/ivrsched/ivrsched/topology"
)

// placed records what the provider saw, with the wall time of each request.
type placed struct {
	mu    sync.Mutex
	calls []*pb.IVRCall
	at    []time.Time
	n     chan struct{}
}

func (p *placed) Place(_ context.Context, c *pb.IVRCall) (provider.Result, error) {
	now := time.Now()
	p.mu.Lock()
	p.calls = append(p.calls, c)
	p.at = append(p.at, now)
	p.mu.Unlock()
	p.n <- struct{}{}
	return provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED, Final: true}, nil
}

// End to end on the embedded broker, several partitions: every user's
// follow-up reaches the provider exactly once, never before its due time.
func TestEndToEndEmbedded(t *testing.T) {
	run := endToEnd(t, 200, nil)
	if got := run.Scheduler.Stats.Fired.Load(); got != 200 {
		t.Fatalf("scheduler fired %d, want 200", got)
	}
}

// faultyReads fails every nth read of a user's value from the scheduler's
// store, limit times in all.
type faultyReads struct {
	storage.Storage
	n, limit int64
	reads    *atomic.Int64
	faults   *atomic.Int64
}

func (f *faultyReads) Get(key string) ([]byte, error) {
	if !strings.HasPrefix(key, topology.ReservedPrefix) && f.reads.Add(1)%f.n == 0 && f.faults.Add(1) <= f.limit {
		return nil, errors.New("injected read fault")
	}
	return f.Storage.Get(key)
}

// ClosedClean passes the local store's answer on, so that indexes kept
// across a session's end (processors/scheduler/dueindex/kept.go) are in play.
func (f *faultyReads) ClosedClean() (int64, bool) {
	return f.Storage.(dueindex.CleanCloser).ClosedClean()
}

// Store faults on the firing path (and the command path) fail the
// partition; the role restarts the processor, the input replays, and every
// follow-up still reaches the provider exactly once, never early.
func TestStoreFaultsLoseNothing(t *testing.T) {
	var reads, faults atomic.Int64
	run := endToEnd(t, 200, func(c *Config) {
		c.wrapSchedulerStorage = func(inner storage.Builder) storage.Builder {
			return func(topic string, part int32) (storage.Storage, error) {
				st, err := inner(topic, part)
				if err != nil || topic != string(c.Topics.SchedulerTable()) {
					return st, err
				}
				return &faultyReads{Storage: st, n: 97, limit: 3, reads: &reads, faults: &faults}, nil
			}
		}
	})
	if n := min(faults.Load(), 3); n < 1 {
		t.Fatalf("no fault injected (%d reads)", reads.Load())
	}
	t.Logf("%d faults injected in %d reads; fired %d (with replays)", min(faults.Load(), 3), reads.Load(), run.Scheduler.Stats.Fired.Load())
	// Every session here ended with a failed partition: no index may be
	// taken back from one (the faults may have left it short).
	if n := run.Scheduler.Punctuator().IndexesReused(); n != 0 {
		t.Fatalf("%d indexes taken back after failed sessions", n)
	}
}

// endToEnd runs both roles on the embedded broker, onboards users with a
// follow-up each, and checks that each reaches the provider exactly once,
// never before its due time.
func endToEnd(t *testing.T, users int, wrap func(*Config)) *Running {
	t.Helper()
	b, err := StartEmbedded("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	prov := &placed{n: make(chan struct{}, 2*users)}
	cfg := Config{
		SuppressionKey: testSuppressionKey,
		Kafka:          kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: []string{b.Addr()}, Partitions: 4, Replication: 1, FlushFrequency: time.Millisecond},
		Topics:         topology.NewTopics("e2e-"),
		DataDir:        t.TempDir(),
		Provider:       prov,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if wrap != nil {
		wrap(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run, done := runReady(ctx, t, cfg)

	em, err := goka.NewEmitter(cfg.Kafka.Brokers, cfg.Topics.Onboarding, new(codec.Command), cfg.Kafka.EmitterOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < users; i++ {
		user := fmt.Sprintf("user-%d", i)
		d := 500*time.Millisecond + time.Duration(i%25)*100*time.Millisecond
		cmd := &pb.Command{UserId: user, RequestedAt: timestamppb.New(start), Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
			Phone: "+14155550100", FollowUps: []*pb.FollowUp{{TaskId: "call", When: &pb.FollowUp_Delay{Delay: durationpb.New(d)}}},
		}}}
		if _, err := em.Emit(user, cmd); err != nil {
			t.Fatal(err)
		}
	}
	if err := em.Finish(); err != nil {
		t.Fatal(err)
	}

	deadline := time.After(60 * time.Second)
	for i := 0; i < users; i++ {
		select {
		case <-prov.n:
		case <-deadline:
			t.Fatalf("only %d of %d calls placed after 60s", i, users)
		case err := <-done:
			t.Fatalf("run ended: %v", err)
		}
	}
	// Anything more would be a duplicate: give stragglers a moment to show.
	select {
	case <-prov.n:
		t.Fatal("a call was placed twice")
	case <-time.After(500 * time.Millisecond):
	}

	prov.mu.Lock()
	defer prov.mu.Unlock()
	seen := map[string]bool{}
	var late []time.Duration
	for i, c := range prov.calls {
		if seen[c.GetUserId()] {
			t.Fatalf("user %s called twice", c.GetUserId())
		}
		seen[c.GetUserId()] = true
		due := c.GetDueAt().AsTime()
		if c.GetFiredAt().AsTime().Before(due) || prov.at[i].Before(due) {
			t.Fatalf("call %s early: due %v fired %v placed %v", c.GetCallId(), due, c.GetFiredAt().AsTime(), prov.at[i])
		}
		late = append(late, prov.at[i].Sub(due))
	}
	slices.Sort(late)
	t.Logf("%d calls, lateness at the provider: p50 %v p99 %v max %v", len(late), late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
	if len(prov.calls) != users {
		t.Fatalf("%d calls placed, want %d", len(prov.calls), users)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	return run
}

// runReady runs both roles with cfg until ctx ends and waits until they are
// ready. done receives what Run returned.
func runReady(ctx context.Context, t *testing.T, cfg Config) (run *Running, done <-chan error) {
	t.Helper()
	return runRolesReady(ctx, t, cfg, Roles{Scheduler: true, Dialer: true})
}

// runRolesReady is runReady of the given roles.
func runRolesReady(ctx context.Context, t *testing.T, cfg Config, roles Roles) (run *Running, done <-chan error) {
	t.Helper()
	started := make(chan *Running, 1)
	ended := make(chan error, 1)
	go func() {
		ended <- Run(ctx, cfg, roles, func(r *Running) { started <- r })
	}()
	select {
	case run = <-started:
	case err := <-ended:
		t.Fatalf("run: %v", err)
	}
	select {
	case <-run.Ready():
	case err := <-ended:
		t.Fatalf("run: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("processors not ready after 60s")
	}
	return run, ended
}

// freeAddr is a free local address (host:port) for a web server.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
