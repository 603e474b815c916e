package dialer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

// A user's value stays within MaxValueBytes whatever History allows: the
// oldest records go first, as History drops them, and every call is placed
// and its result published. A status whose call's record alone would not
// fit is not recorded: it is dead-lettered as state_too_large and its
// result published. Before the bound, the value grew past what the table's
// producer accepts, and the dialer failed at every replay of the status.
func TestValueIsBounded(t *testing.T) {
	const bound = 2000
	rec := &recorder{answer: provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED}}
	h := setup(t, rec, 1, func(c *Config) { c.History, c.MaxValueBytes = 1000, bound })
	dlq := h.tt.NewQueueTracker(string(h.topics.DialerDLQ))
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("c%02d", i)
		c := call("u1", id)
		c.TaskId = strings.Repeat("t", 200) + id
		h.tt.Consume(string(h.topics.Calls), "u1", c)
		h.idle()
		ids = append(ids, id)
	}
	if len(rec.seen()) != 20 || len(h.allResults()) != 20 {
		t.Fatalf("placed %d, want 20, with their results", len(rec.seen()))
	}
	st := h.state("u1")
	b, _ := proto.Marshal(st)
	var kept []string
	for _, r := range st.GetCalls() {
		kept = append(kept, r.GetCallId())
	}
	if len(b) > bound || len(kept) < 2 || !slices.Equal(kept, ids[len(ids)-len(kept):]) {
		t.Fatalf("value of %d bytes (bound %d) keeps calls %v, want the newest ones", len(b), bound, kept)
	}
	// A provider call id as large as the bound.
	s := status("u1", "c19", pb.Outcome_OUTCOME_RINGING, false)
	s.ProviderCallID = strings.Repeat("p", bound)
	if err := h.d.Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if res := h.allResults(); len(res) != 1 || res[0].GetOutcome() != pb.Outcome_OUTCOME_RINGING {
		t.Fatalf("results %v, want the ringing one", res)
	}
	dls := deadLetters(t, dlq)
	if len(dls) != 1 || dls[0].GetReason() != string(deadletter.ReasonStateTooLarge) {
		t.Fatalf("dead letters %v", dls)
	}
	if after, _ := proto.Marshal(h.state("u1")); string(after) != string(b) {
		t.Fatal("the value changed")
	}
	// A status of the oldest record kept: the records dropped to make room
	// are the oldest others, never the one written.
	s = status("u1", kept[0], pb.Outcome_OUTCOME_RINGING, false)
	s.ProviderCallID = strings.Repeat("p", bound/2)
	if err := h.d.Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	st = h.state("u1")
	b, _ = proto.Marshal(st)
	if len(b) > bound || st.GetCalls()[0].GetCallId() != kept[0] || st.GetCalls()[0].GetProviderCallId() != s.ProviderCallID ||
		st.GetCalls()[len(st.GetCalls())-1].GetCallId() != "c19" || len(deadLetters(t, dlq)) != 0 {
		t.Fatalf("value of %d bytes: %v", len(b), st)
	}
}

// A call whose ids are longer than the scheduler allows is not placed: it
// goes to dialer-dlq as too_long.
func TestCallWithTooLongIDs(t *testing.T) {
	rec := &recorder{}
	h := setup(t, rec, 1)
	dlq := h.tt.NewQueueTracker(string(h.topics.DialerDLQ))
	long := strings.Repeat("x", codec.MaxIDBytes+1)
	c := call("u1", long)
	h.tt.Consume(string(h.topics.Calls), "u1", c)
	c = call("u1", "c2")
	c.TaskId = long
	h.tt.Consume(string(h.topics.Calls), "u1", c)
	h.tt.Consume(string(h.topics.Calls), long, call(long, "c3"))
	h.call("u1", "ok")
	h.idle()
	if got := rec.seen(); !slices.Equal(got, []string{"ok"}) {
		t.Fatalf("placed %v", got)
	}
	dls := deadLetters(t, dlq)
	if len(dls) != 3 {
		t.Fatalf("dead letters %v", dls)
	}
	for _, dl := range dls {
		if dl.GetReason() != string(deadletter.ReasonTooLong) {
			t.Fatalf("dead letter %v", dl)
		}
	}
}

// A record on ivr-calls as large as the producer's limit that the dialer
// rejects (it does not decode) is dead-lettered through the same bounded
// writer as the scheduler's: without its value, with the value's size and
// digest. Kept whole, the letter would be refused by the producer and fail
// the partition at every replay. The next call is placed.
func TestRejectedCallNearTheLimitIsDeadLettered(t *testing.T) {
	rec := &recorder{}
	h := setup(t, rec, 1)
	dlq := h.tt.NewQueueTracker(string(h.topics.DialerDLQ))
	limit := sarama.NewConfig().Producer.MaxMessageBytes
	data := append(slices.Clone(garbage), make([]byte, limit-100)...)
	h.tt.Consume(string(h.topics.Calls), "u1", &codec.Undecodable{Data: data})
	h.call("u2", "c2")
	h.idle()
	if got := rec.seen(); !slices.Equal(got, []string{"c2"}) {
		t.Fatalf("placed %v, want c2", got)
	}
	dls := deadLetters(t, dlq)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want one", len(dls))
	}
	dl := dls[0]
	sum := sha256.Sum256(data)
	if dl.GetReason() != "undecodable" || !dl.GetTruncated() || dl.GetValueSize() != int64(len(data)) || !bytes.Equal(dl.GetValueSha256(), sum[:]) || len(dl.GetValue()) != 0 {
		t.Fatalf("dead letter %s truncated %v, value of %d bytes, size %d: want undecodable, truncated, size %d and its digest",
			dl.GetReason(), dl.GetTruncated(), len(dl.GetValue()), dl.GetValueSize(), len(data))
	}
}
