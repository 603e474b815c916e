package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/processors/dialer"
	"github.com/ivrsched/ivrsched/topology"
)

// placed records what the provider saw, with the wall time of each request.
type placed struct {
	mu    sync.Mutex
	calls []*pb.IVRCall
	at    []time.Time
	n     chan struct{}
}

func (p *placed) Place(_ context.Context, c *pb.IVRCall) (dialer.Result, error) {
	now := time.Now()
	p.mu.Lock()
	p.calls = append(p.calls, c)
	p.at = append(p.at, now)
	p.mu.Unlock()
	p.n <- struct{}{}
	return dialer.Result{Outcome: pb.Outcome_OUTCOME_PLACED}, nil
}

// End to end on the embedded broker, several partitions: every user's
// follow-up reaches the provider exactly once, never before its due time.
func TestEndToEndEmbedded(t *testing.T) {
	const users = 200
	b, err := StartEmbedded("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	prov := &placed{n: make(chan struct{}, 2*users)}
	cfg := Config{
		Kafka:    topology.Kafka{Brokers: []string{b.Addr()}, Partitions: 4, Replication: 1, FlushFrequency: time.Millisecond},
		Topics:   topology.NewTopics("e2e-"),
		DataDir:  t.TempDir(),
		Provider: prov,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
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
	select {
	case <-run.Ready():
	case err := <-done:
		t.Fatalf("run: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("processors not ready after 60s")
	}

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
	if got := run.Scheduler.Stats.Fired.Load(); got != users {
		t.Fatalf("scheduler fired %d, want %d", got, users)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}
