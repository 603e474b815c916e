package dialer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
	"github.com/ivrsched/ivrsched/processors/dialer/placement"
	"github.com/ivrsched/ivrsched/topology"
)

// recorder is a provider that records every request. It answers with
// answer (default: answered, final), after gate lets it go if gate is set.
type recorder struct {
	mu     sync.Mutex
	calls  []string
	fail   map[string]error
	answer provider.Result
	gate   chan struct{}
	in     chan string // if set, told of each request
}

func (r *recorder) Place(ctx context.Context, c *pb.IVRCall) (provider.Result, error) {
	r.mu.Lock()
	r.calls = append(r.calls, c.GetCallId())
	err, answer, gate := r.fail[c.GetCallId()], r.answer, r.gate
	r.mu.Unlock()
	if r.in != nil {
		r.in <- c.GetCallId()
	}
	if gate != nil {
		<-gate
	}
	if err != nil {
		return provider.Result{}, err
	}
	if answer.Outcome == 0 {
		answer = provider.Result{Outcome: pb.Outcome_OUTCOME_ANSWERED, Final: true}
	}
	return answer, nil
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

type harness struct {
	tt       *tester.Tester
	d        *Dialer
	p        *placement.Placer
	topics   topology.Topics
	results  *tester.QueueTracker
	commands *tester.QueueTracker
	finals   []*pb.CallResult
}

func setup(t *testing.T, prov provider.Provider, maxInFlight int, opts ...func(*Config)) *harness {
	t.Helper()
	return setupPlacer(t, prov, maxInFlight, nil, opts...)
}

// setupPlacer is setup with pc (nil: none) applied to the placer's configuration.
func setupPlacer(t *testing.T, prov provider.Provider, maxInFlight int, pc func(*placement.Config), opts ...func(*Config)) *harness {
	t.Helper()
	h := &harness{tt: tester.New(t), topics: topology.NewTopics("")}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	loop, err := goka.NewEmitter(nil, h.topics.DialerLoop(), new(codec.CallStatus), goka.WithEmitterTester(h.tt))
	if err != nil {
		t.Fatal(err)
	}
	pcfg := placement.Config{Provider: prov, Results: loop, Table: string(h.topics.DialerTable()), Partitions: 1,
		Calls: string(h.topics.Calls), Events: string(h.topics.Events), Loop: string(h.topics.DialerLoop()),
		MaxInFlight: maxInFlight, Logger: log}
	if pc != nil {
		pc(&pcfg)
	}
	h.p, err = placement.New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Topics: h.topics, Placer: h.p, Loop: loop, Storage: h.tt.StorageBuilder(),
		Clock: clock.NewFake(time.Unix(1e9, 0)), History: 3, Logger: log,
		OnFinal: func(_ goka.Context, r *pb.CallResult) { h.finals = append(h.finals, r) }}
	for _, o := range opts {
		o(&cfg)
	}
	h.d, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.d.Graph().LoopStream().Topic(); got != string(h.topics.DialerLoop()) {
		t.Fatalf("loop topic %s, topology says %s", got, h.topics.DialerLoop())
	}
	proc, err := h.d.Processor(nil, goka.WithTester(h.tt), goka.WithProducerBuilder(kafkatest.SizedProducer(h.tt.ProducerBuilder(), sarama.NewConfig().Producer.MaxMessageBytes)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- proc.Run(ctx) }()
	go func() { done <- h.p.Run(ctx) }()
	h.results = h.tt.NewQueueTracker(string(h.topics.Results))
	h.commands = h.tt.NewQueueTracker(string(h.topics.Onboarding))
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	})
	return h
}

func call(user, id string) *pb.IVRCall {
	return &pb.IVRCall{CallId: id, UserId: user, TaskId: "t-" + id, Phone: "+14155550123", Attempt: 1, DueAt: timestamppb.Now(), FiredAt: timestamppb.Now()}
}

func (h *harness) call(user, id string) { h.tt.Consume(string(h.topics.Calls), user, call(user, id)) }

// idle waits until the placer has placed everything and the answers are
// recorded (the tester's emitter returns once they are processed).
func (h *harness) idle() { <-h.p.Idle() }

func (h *harness) allResults() []*pb.CallResult {
	var out []*pb.CallResult
	for {
		key, v, ok := h.results.Next()
		if !ok {
			return out
		}
		r := v.(*pb.CallResult)
		if r.GetUserId() != key {
			panic("result keyed by another user")
		}
		out = append(out, r)
	}
}

func (h *harness) state(user string) *pb.DialerState {
	v, _ := h.tt.TableValue(h.topics.DialerTable(), user).(*pb.DialerState)
	return v
}

func TestDuplicatesReachTheProviderOnce(t *testing.T) {
	rec := &recorder{}
	h := setup(t, rec, 4)
	for _, id := range []string{"c1", "c2", "c1", "c1", "c2", "c3"} {
		h.call("u1", id)
	}
	h.call("u2", "c1") // another user: its own ids
	h.idle()
	h.call("u1", "c2") // recorded by now
	h.idle()
	if got := slices.Sorted(slices.Values(rec.seen())); !slices.Equal(got, []string{"c1", "c1", "c2", "c3"}) {
		t.Fatalf("provider saw %v", got)
	}
	if h.d.Stats.Duplicates.Load() != 4 || h.d.Stats.Accepted.Load() != 4 || h.d.Stats.Placed.Load() != 4 {
		t.Fatalf("duplicates %d accepted %d placed %d", h.d.Stats.Duplicates.Load(), h.d.Stats.Accepted.Load(), h.d.Stats.Placed.Load())
	}
	res := h.allResults()
	if len(res) != 4 || len(h.finals) != 4 {
		t.Fatalf("%d results, %d finals, want 4", len(res), len(h.finals))
	}
	for _, r := range res {
		if r.GetOutcome() != pb.Outcome_OUTCOME_ANSWERED || !r.GetFinal() || r.GetTaskId() != "t-"+r.GetCallId() || r.GetAttempt() != 1 {
			t.Fatalf("result %v", r)
		}
	}
	if st := h.state("u1"); len(st.GetInFlight()) != 0 || len(st.GetCalls()) != 3 {
		t.Fatalf("u1's value %v", st)
	}
}

func TestProviderErrorIsAFailedOutcome(t *testing.T) {
	rec := &recorder{fail: map[string]error{"bad": errors.New("carrier unreachable")}}
	h := setup(t, rec, 1)
	h.call("u1", "bad")
	h.idle()
	h.call("u1", "good")
	h.idle()
	res := h.allResults()
	if len(res) != 2 || res[0].GetOutcome() != pb.Outcome_OUTCOME_FAILED || !res[0].GetFinal() ||
		res[0].GetDetail() != "carrier unreachable (after 1 requests)" || res[1].GetOutcome() != pb.Outcome_OUTCOME_ANSWERED {
		t.Fatalf("results %v", res)
	}
	if h.d.Stats.Failed.Load() != 1 || len(h.finals) != 2 {
		t.Fatalf("failed %d, finals %d", h.d.Stats.Failed.Load(), len(h.finals))
	}
}

func TestHistoryIsBounded(t *testing.T) {
	h := setup(t, &recorder{}, 1)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		h.call("u1", id)
		h.idle()
	}
	st := h.state("u1")
	if len(st.GetCalls()) != 3 || st.GetCalls()[0].GetCallId() != "c" || st.GetCalls()[2].GetCallId() != "e" {
		t.Fatalf("history %v", st.GetCalls())
	}
}

func TestInvalidCallsAreSkipped(t *testing.T) {
	rec := &recorder{}
	h := setup(t, rec, 1)
	dlq := h.tt.NewQueueTracker(string(h.topics.DialerDLQ))
	h.tt.Consume(string(h.topics.Calls), "u1", &codec.Undecodable{Data: []byte{0xff, 0xff}})
	h.tt.Consume(string(h.topics.Calls), "u1", call("u1", ""))
	h.tt.Consume(string(h.topics.Events), "u1", &codec.Undecodable{Data: []byte{0xff}})
	h.call("u1", "ok")
	h.idle()
	if h.d.Stats.Invalid.Load() != 3 || len(rec.seen()) != 1 {
		t.Fatalf("invalid %d, provider %v", h.d.Stats.Invalid.Load(), rec.seen())
	}
	var reasons []string
	for _, dl := range deadLetters(t, dlq) {
		reasons = append(reasons, dl.GetReason())
	}
	if !slices.Equal(reasons, []string{"undecodable", "missing_call_id", "undecodable"}) {
		t.Fatalf("dead letters %v", reasons)
	}
}

func status(user, id string, o pb.Outcome, final bool) provider.Status {
	return provider.Status{CallID: id, UserID: user, Outcome: o, Final: final, ProviderCallID: "CA-" + id, At: time.Unix(2e9, 0)}
}

// A placed call's statuses are published as they come; the final one once,
// to OnFinal too; a machine that answered makes the call end as machine.
func TestStatusesAndTheFinalOutcome(t *testing.T) {
	h := setup(t, &recorder{answer: provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED, ProviderCallID: "CA-c1"}}, 2)
	h.call("u1", "c1")
	h.idle()
	ctx := context.Background()
	for _, s := range []provider.Status{
		status("u1", "c1", pb.Outcome_OUTCOME_PLACED, false),   // "initiated": nothing new
		status("u1", "c1", pb.Outcome_OUTCOME_RINGING, false),  // published
		status("u1", "c1", pb.Outcome_OUTCOME_RINGING, false),  // sent twice: nothing new
		status("u1", "c1", pb.Outcome_OUTCOME_MACHINE, false),  // machine detection
		status("u1", "c1", pb.Outcome_OUTCOME_ANSWERED, true),  // completed: ends as machine
		status("u1", "c1", pb.Outcome_OUTCOME_NO_ANSWER, true), // after the final: late
		status("u1", "gone", pb.Outcome_OUTCOME_BUSY, true),    // not in the user's value
	} {
		if err := h.d.Publish(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, r := range h.allResults() {
		got = append(got, r.GetCallId()+":"+r.GetOutcome().String()+map[bool]string{true: ":final"}[r.GetFinal()])
		if r.GetProviderCallId() == "" || (r.GetCallId() == "c1" && r.GetTaskId() != "t-c1") {
			t.Errorf("result %v", r)
		}
	}
	want := []string{"c1:OUTCOME_PLACED", "c1:OUTCOME_RINGING", "c1:OUTCOME_MACHINE", "c1:OUTCOME_MACHINE:final", "gone:OUTCOME_BUSY:final"}
	if !slices.Equal(got, want) {
		t.Fatalf("results %v\nwant    %v", got, want)
	}
	if len(h.finals) != 1 || h.finals[0].GetOutcome() != pb.Outcome_OUTCOME_MACHINE || h.d.Stats.Late.Load() != 1 || h.d.Stats.Unknown.Load() != 1 {
		t.Fatalf("finals %v, late %d, unknown %d", h.finals, h.d.Stats.Late.Load(), h.d.Stats.Unknown.Load())
	}
	r := h.state("u1").GetCalls()[0]
	if r.GetOutcome() != pb.Outcome_OUTCOME_MACHINE || !r.GetFinal() || !r.GetMachine() || r.GetProviderCallId() != "CA-c1" {
		t.Fatalf("record %v", r)
	}
}

// A status callback may come before the placement's answer is recorded:
// the call counts as placed from then on.
func TestCallbackBeforeThePlacementsAnswer(t *testing.T) {
	rec := &recorder{answer: provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED, ProviderCallID: "CA-c1"}, gate: make(chan struct{}), in: make(chan string, 1)}
	h := setup(t, rec, 2)
	h.call("u1", "c1")
	<-rec.in
	if err := h.d.Publish(context.Background(), provider.Status{CallID: "c1", UserID: "u1", Outcome: pb.Outcome_OUTCOME_RINGING}); err != nil {
		t.Fatal(err)
	}
	close(rec.gate)
	h.idle()
	res := h.allResults()
	if len(res) != 1 || res[0].GetOutcome() != pb.Outcome_OUTCOME_RINGING {
		t.Fatalf("results %v, want the ringing only", res)
	}
	if st := h.state("u1"); len(st.GetInFlight()) != 0 || st.GetCalls()[0].GetProviderCallId() != "CA-c1" {
		t.Fatalf("value %v", st)
	}
}

// A status replayed after a crash (at or below the offset its record holds)
// publishes its result again: the record's write may have reached Kafka
// without it.
func TestReplayedStatusIsPublishedAgain(t *testing.T) {
	h := setup(t, &recorder{}, 1)
	h.tt.SetTableValue(h.topics.DialerTable(), "u1", &pb.DialerState{Calls: []*pb.DialRecord{
		{CallId: "c1", TaskId: "t-c1", Attempt: 2, Outcome: pb.Outcome_OUTCOME_BUSY, Final: true, StatusOffset: 1 << 40}}})
	h.tt.Consume(string(h.topics.DialerLoop()), "u1", &pb.CallStatus{CallId: "c1", UserId: "u1", Outcome: pb.Outcome_OUTCOME_BUSY, Final: true})
	res := h.allResults()
	if len(res) != 1 || res[0].GetOutcome() != pb.Outcome_OUTCOME_BUSY || !res[0].GetFinal() || res[0].GetAttempt() != 2 || len(h.finals) != 1 {
		t.Fatalf("results %v, finals %v", res, h.finals)
	}
}

// The scheduler forgot or expired a user: the dialer deletes the user's
// value, and the user's calls not yet placed are not placed, value or not
// (a call in flight writes no value). A placement answered after its user
// was forgotten is published, not recorded. Other events change nothing.
func TestForgottenUsersAreErased(t *testing.T) {
	rec := &recorder{gate: make(chan struct{}), in: make(chan string, 8)}
	h := setup(t, rec, 1)
	h.call("u1", "c1")
	<-rec.in // placing c1; the others wait in the queue
	h.call("u2", "c2")
	h.call("u2", "c3")
	h.call("u3", "c4")
	for _, u := range []string{"u1", "u2", "u3"} {
		if st := h.state(u); st != nil {
			t.Fatalf("a call in flight wrote %s's value: %v", u, st)
		}
	}
	ev := func(user string, k pb.ScheduleEvent_Kind) {
		h.tt.Consume(string(h.topics.Events), user, &pb.ScheduleEvent{UserId: user, Kind: k})
	}
	ev("u2", pb.ScheduleEvent_KIND_FORGOTTEN) // no value to delete
	ev("u3", pb.ScheduleEvent_KIND_CANCELLED)
	ev("u1", pb.ScheduleEvent_KIND_EXPIRED) // c1 is being placed
	close(rec.gate)
	h.idle()
	if got := rec.seen(); !slices.Equal(got, []string{"c1", "c4"}) {
		t.Fatalf("placed %v, want c1 and c4 (u2's calls dropped)", got)
	}
	if h.state("u1") != nil || h.state("u3") == nil || h.d.Stats.Forgotten.Load() != 2 || h.d.Stats.Unknown.Load() != 1 {
		t.Fatalf("u1 %v (forgotten while placed), u3 %v, forgotten %d, unknown %d", h.state("u1"), h.state("u3"),
			h.d.Stats.Forgotten.Load(), h.d.Stats.Unknown.Load())
	}
	got := h.allResults()
	if len(got) != 2 {
		t.Fatalf("results %v, want c1's (published, not recorded) and c4's", got)
	}
	// Not recorded, c1's result still says which follow-up it answers (the
	// placement's answer carries it): a consumer of ivr-results, or an
	// answer replayed after a crash before its call, needs it.
	for _, r := range got {
		if want := call(r.GetUserId(), r.GetCallId()); r.GetTaskId() != want.GetTaskId() || r.GetAttempt() != want.GetAttempt() {
			t.Errorf("result of %s: task %q attempt %d, want %q and %d", r.GetCallId(), r.GetTaskId(), r.GetAttempt(), want.GetTaskId(), want.GetAttempt())
		}
	}
	ev("u3", pb.ScheduleEvent_KIND_FORGOTTEN)
	if h.state("u3") != nil {
		t.Fatalf("u3 %v after forget", h.state("u3"))
	}
}

// A call in flight writes nothing: the first status of a call the placer
// holds creates its record, with the call's task and attempt; a call id
// the placer holds is dropped as one the value records.
func TestFirstStatusCreatesTheRecord(t *testing.T) {
	rec := &recorder{gate: make(chan struct{}), in: make(chan string, 1)}
	h := setup(t, rec, 1)
	h.call("u1", "c1")
	<-rec.in
	h.call("u1", "c1") // held: dropped
	if st := h.state("u1"); st != nil || h.d.Stats.Duplicates.Load() != 1 {
		t.Fatalf("value %v, duplicates %d", st, h.d.Stats.Duplicates.Load())
	}
	close(rec.gate)
	h.idle()
	st := h.state("u1")
	if len(st.GetCalls()) != 1 || len(st.GetInFlight()) != 0 {
		t.Fatalf("value %v", st)
	}
	if r := st.GetCalls()[0]; r.GetCallId() != "c1" || r.GetTaskId() != "t-c1" || r.GetAttempt() != 1 || !r.GetFinal() {
		t.Fatalf("record %v", r)
	}
	h.call("u1", "c1") // recorded: dropped
	h.idle()
	if got := rec.seen(); len(got) != 1 || h.d.Stats.Duplicates.Load() != 2 {
		t.Fatalf("placed %v, duplicates %d", got, h.d.Stats.Duplicates.Load())
	}
}

// A value written before calls in flight were the uncommitted tail of
// ivr-calls may list calls in flight: the partition places them when it
// comes (placement), and their first status moves them to the records.
func TestCallsInFlightOfOlderValues(t *testing.T) {
	h := setup(t, &recorder{}, 1)
	h.tt.SetTableValue(h.topics.DialerTable(), "u1", &pb.DialerState{InFlight: []*pb.IVRCall{call("u1", "old")}})
	h.call("u1", "old") // listed in flight: dropped
	h.tt.Consume(string(h.topics.DialerLoop()), "u1", &pb.CallStatus{CallId: "old", UserId: "u1", Outcome: pb.Outcome_OUTCOME_BUSY, Final: true, Placement: true})
	st := h.state("u1")
	if len(st.GetInFlight()) != 0 || len(st.GetCalls()) != 1 || st.GetCalls()[0].GetTaskId() != "t-old" || h.d.Stats.Duplicates.Load() != 1 {
		t.Fatalf("value %v, duplicates %d", st, h.d.Stats.Duplicates.Load())
	}
}

// The two input topics of a partition are consumed side by side: a call the
// scheduler fired before its user's Forget may reach the dialer after the
// Forget (ivr-calls lagging). It is not placed: it was fired before the
// Forget (from a value created before it: created_offset against the
// event's forget_offset), and is dropped and counted.
func TestCallFiredBeforeTheForgetIsNotPlacedAfterIt(t *testing.T) {
	rec := &recorder{}
	h := setup(t, rec, 1)
	fired := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	late := call("u1", "x")
	late.FiredAt, late.CreatedOffset = timestamppb.New(fired), 3
	h.tt.Consume(string(h.topics.Events), "u1", &pb.ScheduleEvent{UserId: "u1", Kind: pb.ScheduleEvent_KIND_FORGOTTEN,
		At: timestamppb.New(fired.Add(time.Millisecond)), ForgetOffset: 10})
	h.tt.Consume(string(h.topics.Calls), "u1", late)
	h.call("u2", "other") // another user's call: placed
	h.idle()
	if got := rec.seen(); !slices.Equal(got, []string{"other"}) {
		t.Fatalf("placed %v: the call fired before u1's Forget was placed after it", got)
	}
	if h.state("u1") != nil || h.d.Stats.FiredBeforeForget.Load() != 1 || h.d.Stats.Accepted.Load() != 1 {
		t.Fatalf("u1's value %v after the Forget, %d dropped as fired before it, %d accepted",
			h.state("u1"), h.d.Stats.FiredBeforeForget.Load(), h.d.Stats.Accepted.Load())
	}
}

// A user onboarded again after the Forget is called: the calls fired after
// the Forget are placed, those fired before it are not.
func TestUserOnboardedAgainAfterTheForgetIsCalled(t *testing.T) {
	rec := &recorder{}
	h := setup(t, rec, 1)
	forgot := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	h.tt.Consume(string(h.topics.Events), "u1", &pb.ScheduleEvent{UserId: "u1", Kind: pb.ScheduleEvent_KIND_FORGOTTEN, At: timestamppb.New(forgot), ForgetOffset: 10})
	old, again := call("u1", "old"), call("u1", "again")
	old.FiredAt, again.FiredAt = timestamppb.New(forgot.Add(-time.Second)), timestamppb.New(forgot.Add(time.Second))
	old.CreatedOffset, again.CreatedOffset = 3, 11 // onboarded before the Forget, and again after it
	h.tt.Consume(string(h.topics.Calls), "u1", old)
	h.tt.Consume(string(h.topics.Calls), "u1", again)
	h.idle()
	if got := rec.seen(); !slices.Equal(got, []string{"again"}) || h.d.Stats.FiredBeforeForget.Load() != 1 {
		t.Fatalf("placed %v, %d dropped: want the call fired after the Forget only", got, h.d.Stats.FiredBeforeForget.Load())
	}
	if st := h.state("u1"); len(st.GetCalls()) != 1 || st.GetCalls()[0].GetCallId() != "again" {
		t.Fatalf("u1's value %v", st)
	}
}
