package dialer

import (
	"context"
	"testing"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/policy"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

func withPolicy(t *testing.T, doc string) func(*Config) {
	t.Helper()
	p, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return func(c *Config) { c.Policy = func() *policy.Policy { return p } }
}

func (h *harness) ended(t *testing.T) []*pb.CallEnded {
	t.Helper()
	var out []*pb.CallEnded
	for {
		key, v, ok := h.commands.Next()
		if !ok {
			return out
		}
		cmd := v.(*pb.Command)
		if key != cmd.GetUserId() || cmd.GetRequestedAt() == nil {
			t.Fatalf("command %v under key %s", cmd, key)
		}
		out = append(out, cmd.GetCallEnded())
	}
}

// While the calling policy retries, each call's final outcome goes to the
// scheduler as a CallEnded command on the user's key, from the callback
// that made it final; a replayed status sends it again (the scheduler
// drops the repeat); statuses that are not final send nothing.
func TestFinalOutcomesGoToTheScheduler(t *testing.T) {
	h := setup(t, &recorder{answer: provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED}}, 2,
		withPolicy(t, "default: {retry: {no-answer: {delay: 10m}}}"))
	h.call("u1", "c1")
	h.idle()
	for _, s := range []provider.Status{
		status("u1", "c1", pb.Outcome_OUTCOME_RINGING, false),
		status("u1", "c1", pb.Outcome_OUTCOME_NO_ANSWER, true),
		status("u1", "c1", pb.Outcome_OUTCOME_ANSWERED, true), // late
	} {
		if err := h.d.Publish(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	got := h.ended(t)
	if len(got) != 1 || got[0].GetCallId() != "c1" || got[0].GetTaskId() != "t-c1" || got[0].GetAttempt() != 1 || got[0].GetOutcome() != pb.Outcome_OUTCOME_NO_ANSWER {
		t.Fatalf("reported %v", got)
	}
	// The status that made it final, replayed after a crash: its offset is
	// at or below the one the record holds.
	st := h.state("u1")
	st.GetCalls()[0].StatusOffset = 1 << 40
	h.tt.SetTableValue(h.topics.DialerTable(), "u1", st)
	h.tt.Consume(string(h.topics.DialerLoop()), "u1", &pb.CallStatus{CallId: "c1", UserId: "u1", Outcome: pb.Outcome_OUTCOME_NO_ANSWER, Final: true})
	if again := h.ended(t); len(again) != 1 || again[0].GetCallId() != "c1" {
		t.Fatalf("replay reported %v", again)
	}
	if h.d.Stats.Reported.Load() != 2 {
		t.Fatalf("reported %d", h.d.Stats.Reported.Load())
	}
}

// Without retries in the calling policy (or without a policy), nothing goes
// to the scheduler.
func TestNoRetriesNoReports(t *testing.T) {
	for _, opt := range []func(*Config){withPolicy(t, "default: {retry: none}"), func(*Config) {}} {
		h := setup(t, &recorder{answer: provider.Result{Outcome: pb.Outcome_OUTCOME_BUSY, Final: true}}, 1, opt)
		h.call("u1", "c1")
		h.idle()
		if got := h.ended(t); len(got) != 0 || len(h.finals) != 1 {
			t.Fatalf("reported %v, finals %v", got, h.finals)
		}
	}
}
