package app

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
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
	"github.com/ivrsched/ivrsched/topology"
)

// gatedStore holds the first restore of its partition in MarkRecovered
// until release is closed, and fails the first read of failKey.
type gatedStore struct {
	storage.Storage
	hold    bool
	release <-chan struct{}
	failKey string
	failed  *atomic.Bool
	fault   chan<- struct{}
}

func (g *gatedStore) MarkRecovered() error {
	if g.hold {
		<-g.release
	}
	return g.Storage.MarkRecovered()
}

func (g *gatedStore) Get(key string) ([]byte, error) {
	if key == g.failKey && g.failed.CompareAndSwap(false, true) {
		close(g.fault)
		return nil, errors.New("injected read fault")
	}
	return g.Storage.Get(key)
}

// /healthz answers while the process is up; /readyz answers 503 with what
// is not ready while a partition restores, 200 once every role runs with
// its partitions restored and indexed, and 503 again while a role restarts
// after a failure, until its new processor is ready.
func TestHealthAndReadiness(t *testing.T) {
	b, err := StartEmbedded("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	web := freeAddr(t)

	release := make(chan struct{})
	fault := make(chan struct{})
	var held, failed atomic.Bool
	cfg := Config{
		SuppressionKey: testSuppressionKey,
		Kafka:          kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: []string{b.Addr()}, Partitions: 4, Replication: 1, FlushFrequency: time.Millisecond},
		Topics:         topology.NewTopics("health-"),
		DataDir:        t.TempDir(),
		HTTP:           web,
		Provider:       &placed{n: make(chan struct{}, 10)},
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	cfg.wrapSchedulerStorage = func(inner storage.Builder) storage.Builder {
		return func(topic string, part int32) (storage.Storage, error) {
			st, err := inner(topic, part)
			if err != nil || topic != string(cfg.Topics.SchedulerTable()) {
				return st, err
			}
			hold := part == 0 && held.CompareAndSwap(false, true)
			return &gatedStore{Storage: st, hold: hold, release: release, failKey: "fail-me", failed: &failed, fault: fault}, nil
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan *Running, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, Roles{Scheduler: true, Dialer: true}, func(r *Running) { started <- r }) }()
	var run *Running
	select {
	case run = <-started:
	case err := <-done:
		t.Fatalf("run: %v", err)
	}

	probe := func(path string) (int, Readiness) {
		t.Helper()
		resp, err := http.Get("http://" + web + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r Readiness
		body, _ := io.ReadAll(resp.Body)
		if resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &r) != nil {
			t.Fatalf("%s: %s %q, want JSON", path, resp.Header.Get("Content-Type"), body)
		}
		return resp.StatusCode, r
	}
	// await polls /readyz, as an orchestrator does, until it answers code
	// and the scheduler's reason is why (any with "*").
	await := func(code int, why string) Readiness {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, r := probe("/readyz")
			if got == code && (why == "*" || r.NotReady["scheduler"] == why) {
				return r
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz = %d %+v after 30s; want %d with the scheduler %q", got, r, code, why)
			}
			select {
			case err := <-done:
				t.Fatalf("run ended: %v", err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	if code, _ := probe("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d while starting, want 200", code)
	}
	r := await(http.StatusServiceUnavailable, "restoring partitions 0")
	t.Logf("partition 0 held in its restore: /readyz 503 %+v", r)
	if r.Ready {
		t.Fatal("ready = true in a 503")
	}
	select {
	case <-run.Ready():
		t.Fatal("Ready closed while partition 0 restores")
	default:
	}
	close(release)
	select {
	case <-run.Ready():
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("not ready 60s after the restore was released")
	}
	if code, r := probe("/readyz"); code != http.StatusOK || !r.Ready || len(r.NotReady) != 0 {
		t.Fatalf("/readyz = %d %+v once ready, want 200 ready", code, r)
	}
	for p := int32(0); p < 4; p++ {
		if run.Scheduler.Punctuator().Index(p) == nil {
			t.Fatalf("ready without the due index of partition %d", p)
		}
	}
	// A partition without its due index is not ready.
	sched := run.roles[0]
	built := sched.indexed
	sched.indexed = func(p int32) bool { return p != 2 && built(p) }
	if r := run.Readiness(); r.Ready || r.NotReady["scheduler"] != "building the due index of partitions 2" {
		t.Fatalf("readiness without the index of partition 2: %+v", r)
	}
	sched.indexed = built

	// A failed processor: 503 while the role restarts, 200 once it runs again.
	em, err := goka.NewEmitter(cfg.Kafka.Brokers, cfg.Topics.Onboarding, new(codec.Command), cfg.Kafka.EmitterOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	cmd := &pb.Command{UserId: "fail-me", RequestedAt: timestamppb.Now(), Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
		Phone: "+14155550100", FollowUps: []*pb.FollowUp{{TaskId: "call", When: &pb.FollowUp_Delay{Delay: durationpb.New(time.Hour)}}},
	}}}
	if err := em.EmitSync("fail-me", cmd); err != nil {
		t.Fatal(err)
	}
	if err := em.Finish(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fault:
	case <-time.After(30 * time.Second):
		t.Fatal("the command never read the user's value")
	}
	r = await(http.StatusServiceUnavailable, "*")
	t.Logf("after the injected fault: /readyz 503 %+v", r)
	if r.NotReady["scheduler"] == "" {
		t.Fatalf("503 without the scheduler's reason: %+v", r)
	}
	await(http.StatusServiceUnavailable, "restarting after a failure")
	r = await(http.StatusOK, "")
	if !r.Ready {
		t.Fatalf("200 without ready: %+v", r)
	}
	if code, _ := probe("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d, want 200", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
