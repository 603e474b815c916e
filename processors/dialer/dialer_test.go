package dialer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/topology"
)

// recorder is a provider that records every request.
type recorder struct {
	mu    sync.Mutex
	calls []string
	fail  map[string]error
}

func (r *recorder) Place(ctx context.Context, c *pb.IVRCall) (Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c.GetCallId())
	if err := r.fail[c.GetCallId()]; err != nil {
		return Result{}, err
	}
	return Result{Outcome: pb.Outcome_OUTCOME_ANSWERED}, nil
}

func setup(t *testing.T, p Provider) (*tester.Tester, *Dialer, topology.Topics) {
	t.Helper()
	tt := tester.New(t)
	topics := topology.NewTopics("")
	d, err := New(Config{Topics: topics, Provider: p, Clock: clock.NewFake(time.Unix(1e9, 0)), CallTimeout: time.Second, History: 3,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	proc, err := d.Processor(nil, goka.WithTester(tt))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("processor: %v", err)
		}
	})
	return tt, d, topics
}

func call(user, id string) *pb.IVRCall {
	return &pb.IVRCall{CallId: id, UserId: user, TaskId: "t-" + id, Phone: "+14155550123", Attempt: 1, DueAt: timestamppb.Now(), FiredAt: timestamppb.Now()}
}

func TestDuplicatesReachTheProviderOnce(t *testing.T) {
	rec := &recorder{}
	tt, d, topics := setup(t, rec)
	results := tt.NewQueueTracker(string(topics.Results))
	for _, id := range []string{"c1", "c2", "c1", "c1", "c2", "c3"} {
		tt.Consume(string(topics.Calls), "u1", call("u1", id))
	}
	tt.Consume(string(topics.Calls), "u2", call("u2", "c1")) // another user: its own ids
	if got := rec.calls; len(got) != 4 || got[0] != "c1" || got[1] != "c2" || got[2] != "c3" || got[3] != "c1" {
		t.Fatalf("provider saw %v", got)
	}
	if d.Stats.Duplicates.Load() != 3 || d.Stats.Placed.Load() != 4 {
		t.Fatalf("duplicates %d placed %d", d.Stats.Duplicates.Load(), d.Stats.Placed.Load())
	}
	var n int
	for {
		key, v, ok := results.Next()
		if !ok {
			break
		}
		r := v.(*pb.CallResult)
		if r.GetOutcome() != pb.Outcome_OUTCOME_ANSWERED || r.GetUserId() != key || r.GetTaskId() != "t-"+r.GetCallId() {
			t.Fatalf("result %v", r)
		}
		n++
	}
	if n != 4 {
		t.Fatalf("%d results, want 4", n)
	}
}

func TestProviderErrorIsAFailedOutcome(t *testing.T) {
	rec := &recorder{fail: map[string]error{"bad": errors.New("carrier unreachable")}}
	tt, d, topics := setup(t, rec)
	results := tt.NewQueueTracker(string(topics.Results))
	tt.Consume(string(topics.Calls), "u1", call("u1", "bad"))
	tt.Consume(string(topics.Calls), "u1", call("u1", "good"))
	_, v, _ := results.Next()
	if r := v.(*pb.CallResult); r.GetOutcome() != pb.Outcome_OUTCOME_FAILED || r.GetDetail() != "carrier unreachable" {
		t.Fatalf("result %v", r)
	}
	_, v, _ = results.Next()
	if r := v.(*pb.CallResult); r.GetOutcome() != pb.Outcome_OUTCOME_ANSWERED {
		t.Fatalf("result %v", r)
	}
	if d.Stats.Failed.Load() != 1 {
		t.Fatalf("failed %d", d.Stats.Failed.Load())
	}
}

func TestHistoryIsBounded(t *testing.T) {
	tt, _, topics := setup(t, &recorder{})
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		tt.Consume(string(topics.Calls), "u1", call("u1", id))
	}
	st := tt.TableValue(topics.DialerTable(), "u1").(*pb.DialerState)
	if len(st.GetCalls()) != 3 || st.GetCalls()[0].GetCallId() != "c" || st.GetCalls()[2].GetCallId() != "e" {
		t.Fatalf("history %v", st.GetCalls())
	}
}

func TestInvalidCallsAreSkipped(t *testing.T) {
	rec := &recorder{}
	tt, d, topics := setup(t, rec)
	dlq := tt.NewQueueTracker(string(topics.DialerDLQ))
	tt.Consume(string(topics.Calls), "u1", &codec.Undecodable{Data: []byte{0xff, 0xff}})
	tt.Consume(string(topics.Calls), "u1", call("u1", ""))
	tt.Consume(string(topics.Calls), "u1", call("u1", "ok"))
	if d.Stats.Invalid.Load() != 2 || len(rec.calls) != 1 {
		t.Fatalf("invalid %d, provider %v", d.Stats.Invalid.Load(), rec.calls)
	}
	var reasons []string
	for {
		_, v, ok := dlq.Next()
		if !ok {
			break
		}
		reasons = append(reasons, v.(*pb.DeadLetter).GetReason())
	}
	if len(reasons) != 2 || reasons[0] != "undecodable" || reasons[1] != "missing_call_id" {
		t.Fatalf("dead letters %v", reasons)
	}
}
