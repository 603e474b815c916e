package dialer

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka/tester"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// garbage does not decode as a DialerState (a field with wire type 7).
var garbage = []byte{0x0f, 0xff, 0xff}

func (h *harness) raw(user string) any { return h.tt.TableValue(h.topics.DialerTable(), user) }

// deadLetters returns the dead letters q has not returned yet.
func deadLetters(t *testing.T, q *tester.QueueTracker) []*pb.DeadLetter {
	t.Helper()
	var out []*pb.DeadLetter
	for {
		_, v, ok := q.Next()
		if !ok {
			return out
		}
		out = append(out, v.(*pb.DeadLetter))
	}
}

// A user's stored value that does not decode is not read as empty: whether
// a call to the user was placed before is unknown, so it is not placed
// but dead-lettered as unreadable_state with the call, and the value is
// kept, until a Forget erases it; the user's calls fired after the Forget
// are placed.
func TestUnreadableValueStopsTheUsersCalls(t *testing.T) {
	rec := &recorder{}
	h := setup(t, rec, 1)
	dlq := h.tt.NewQueueTracker(string(h.topics.DialerDLQ))
	h.tt.SetTableValue(h.topics.DialerTable(), "u1", &codec.Undecodable{Data: garbage})
	if _, ok := h.raw("u1").(*codec.Undecodable); !ok {
		t.Fatalf("the table holds %T, want the undecodable bytes", h.raw("u1"))
	}
	c := call("u1", "c1")
	h.tt.Consume(string(h.topics.Calls), "u1", c)
	h.call("u2", "c2") // another user: placed
	h.idle()
	if got := rec.seen(); !slices.Equal(got, []string{"c2"}) {
		t.Fatalf("placed %v, want u2's call only", got)
	}
	dls := deadLetters(t, dlq)
	if len(dls) != 1 {
		t.Fatalf("dead letters %v, want one", dls)
	}
	dl := dls[0]
	sent := &pb.IVRCall{}
	if err := proto.Unmarshal(dl.GetValue(), sent); err != nil || dl.GetReason() != "unreadable_state" || string(dl.GetKey()) != "u1" ||
		dl.GetSourceTopic() != string(h.topics.Calls) || sent.GetCallId() != "c1" || !strings.Contains(dl.GetDetail(), "not placed") {
		t.Fatalf("dead letter %v (call %v, %v)", dl, sent, err)
	}
	if u, ok := h.raw("u1").(*codec.Undecodable); !ok || !bytes.Equal(u.GetData(), garbage) {
		t.Fatalf("u1's value %v, want the stored bytes kept", h.raw("u1"))
	}
	if h.d.Stats.Accepted.Load() != 1 || h.d.Stats.Duplicates.Load() != 0 || h.d.DeadLetters()["unreadable_state"] != 1 {
		t.Fatalf("accepted %d, duplicates %d, dead letters %v", h.d.Stats.Accepted.Load(), h.d.Stats.Duplicates.Load(), h.d.DeadLetters())
	}

	forgot := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	h.tt.Consume(string(h.topics.Events), "u1", &pb.ScheduleEvent{UserId: "u1", Kind: pb.ScheduleEvent_KIND_FORGOTTEN, At: timestamppb.New(forgot), ForgetOffset: 10})
	if v := h.raw("u1"); v != nil {
		t.Fatalf("u1's value %v after the Forget", v)
	}
	again := call("u1", "again") // onboarded again after the Forget
	again.FiredAt, again.CreatedOffset = timestamppb.New(forgot.Add(time.Second)), 11
	h.tt.Consume(string(h.topics.Calls), "u1", again)
	h.idle()
	if got := rec.seen(); !slices.Equal(got, []string{"c2", "again"}) {
		t.Fatalf("placed %v, want u1's call after the Forget", got)
	}
	if st := h.state("u1"); len(st.GetCalls()) != 1 || st.GetCalls()[0].GetCallId() != "again" {
		t.Fatalf("u1's value %v", st)
	}
}

// A status of a placed call whose user's value stopped decoding meanwhile
// is not written over the value: it is dead-lettered, the placer no longer
// holds the call, and its result is published, the final one handed to
// the retries and OnFinal, with the call's task and attempt.
func TestStatusOfAUserWithAnUnreadableValue(t *testing.T) {
	rec := &recorder{gate: make(chan struct{}), in: make(chan string, 1)}
	h := setup(t, rec, 1)
	dlq := h.tt.NewQueueTracker(string(h.topics.DialerDLQ))
	h.call("u1", "c1")
	<-rec.in // being placed; nothing written yet
	h.tt.SetTableValue(h.topics.DialerTable(), "u1", &codec.Undecodable{Data: garbage})
	close(rec.gate)
	h.idle() // returns once the placer holds nothing: the status released c1
	res := h.allResults()
	if len(res) != 1 || res[0].GetCallId() != "c1" || res[0].GetOutcome() != pb.Outcome_OUTCOME_ANSWERED || !res[0].GetFinal() ||
		res[0].GetTaskId() != "t-c1" || res[0].GetAttempt() != 1 {
		t.Fatalf("results %v", res)
	}
	if len(h.finals) != 1 || h.d.Stats.Outcome(pb.Outcome_OUTCOME_ANSWERED) != 1 {
		t.Fatalf("finals %v, answered %d", h.finals, h.d.Stats.Outcome(pb.Outcome_OUTCOME_ANSWERED))
	}
	dls := deadLetters(t, dlq)
	st := &pb.CallStatus{}
	if len(dls) != 1 || dls[0].GetReason() != "unreadable_state" || dls[0].GetSourceTopic() != string(h.topics.DialerLoop()) ||
		proto.Unmarshal(dls[0].GetValue(), st) != nil || st.GetCallId() != "c1" || !strings.Contains(dls[0].GetDetail(), "not recorded") {
		t.Fatalf("dead letters %v", dls)
	}
	if u, ok := h.raw("u1").(*codec.Undecodable); !ok || !bytes.Equal(u.GetData(), garbage) {
		t.Fatalf("u1's value %v, want the stored bytes kept", h.raw("u1"))
	}
	h.call("u1", "c1") // the same call again: the value cannot say it was placed
	h.idle()
	if got := rec.seen(); len(got) != 1 {
		t.Fatalf("placed %v: c1 placed twice", got)
	}
}
