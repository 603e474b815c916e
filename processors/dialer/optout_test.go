package dialer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka/tester"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
	"github.com/ivrsched/ivrsched/internal/providers/webhook"
)

// numberKey stands in for the keyed hash (internal/suppress tests that).
func numberKey(n string) []byte { s := sha256.Sum256([]byte("k" + n)); return s[:] }

func withNumberKey(c *Config) { c.NumberKey = numberKey }

// entries drains the suppression topic: key to entry.
func entries(t *testing.T, q *tester.QueueTracker) map[string]*pb.Suppression {
	t.Helper()
	out := map[string]*pb.Suppression{}
	for {
		key, v, ok := q.Next()
		if !ok {
			return out
		}
		e := &pb.Suppression{}
		if err := proto.Unmarshal(v.([]byte), e); err != nil {
			t.Fatalf("entry under %s: %v", key, err)
		}
		out[key] = e
	}
}

// An opt-out reported for a call lists the number the call was placed to,
// which the call's record keeps as its keyed hash: once, with the reason
// and the call id, from the status's callback; the result carries
// OUTCOME_OPTED_OUT, final. Another user's number is not listed by it.
func TestOptOutListsTheCalledNumber(t *testing.T) {
	h := setup(t, &recorder{answer: provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED, ProviderCallID: "CA-c1"}}, 2, withNumberKey)
	sup := h.tt.NewQueueTracker(string(h.topics.Suppressions))
	h.call("u1", "c1") // +14155550123
	other := call("u2", "c2")
	other.Phone = "+14155550124"
	h.tt.Consume(string(h.topics.Calls), "u2", other)
	h.idle()
	if r := h.state("u1").GetCalls()[0]; hex.EncodeToString(r.GetNumberKey()) != hex.EncodeToString(numberKey("+14155550123")) {
		t.Fatalf("record %v keeps no number key", r)
	}
	h.allResults()
	if err := h.d.Publish(context.Background(), status("u1", "c1", pb.Outcome_OUTCOME_OPTED_OUT, true)); err != nil {
		t.Fatal(err)
	}
	got := entries(t, sup)
	e := got[hex.EncodeToString(numberKey("+14155550123"))]
	if len(got) != 1 || e == nil || !strings.HasPrefix(e.GetReason(), "opted out by keypress") || !strings.Contains(e.GetReason(), "c1") ||
		e.GetSource() != pb.Suppression_SOURCE_OPT_OUT || e.GetAddedAt() == nil || e.GetUntil() != nil {
		t.Fatalf("entries %v", got)
	}
	res := h.allResults()
	if len(res) != 1 || res[0].GetOutcome() != pb.Outcome_OUTCOME_OPTED_OUT || !res[0].GetFinal() {
		t.Fatalf("results %v", res)
	}
	if r := h.state("u1").GetCalls()[0]; r.GetOutcome() != pb.Outcome_OUTCOME_OPTED_OUT || !r.GetFinal() {
		t.Fatalf("record %v", r)
	}
	// The call's completion after it changes nothing; nor does the opt-out sent again.
	for _, s := range []provider.Status{status("u1", "c1", pb.Outcome_OUTCOME_ANSWERED, true), status("u1", "c1", pb.Outcome_OUTCOME_OPTED_OUT, true)} {
		if err := h.d.Publish(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	if got := entries(t, sup); len(got) != 0 || len(h.allResults()) != 0 {
		t.Fatalf("entries %v after the final outcome", got)
	}
	if h.d.Stats.OptOuts.Load() != 1 || h.d.Stats.Outcome(pb.Outcome_OUTCOME_OPTED_OUT) != 1 {
		t.Fatalf("opt-outs %d, finals opted out %d", h.d.Stats.OptOuts.Load(), h.d.Stats.Outcome(pb.Outcome_OUTCOME_OPTED_OUT))
	}
}

// An opt-out naming a call the user's value does not hold, or another
// provider call than the one recorded, lists nothing, publishes nothing,
// and is counted.
func TestOptOutOfAnUnknownCallIsIgnored(t *testing.T) {
	h := setup(t, &recorder{answer: provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED, ProviderCallID: "CA-c1"}}, 2, withNumberKey)
	sup := h.tt.NewQueueTracker(string(h.topics.Suppressions))
	h.call("u1", "c1")
	h.idle()
	h.allResults()
	forged := status("u1", "c1", pb.Outcome_OUTCOME_OPTED_OUT, true)
	forged.ProviderCallID = "CA-another"
	for _, s := range []provider.Status{status("u1", "nope", pb.Outcome_OUTCOME_OPTED_OUT, true), status("u9", "c1", pb.Outcome_OUTCOME_OPTED_OUT, true), forged} {
		if err := h.d.Publish(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	if got := entries(t, sup); len(got) != 0 {
		t.Fatalf("entries %v", got)
	}
	if res := h.allResults(); len(res) != 0 {
		t.Fatalf("results %v", res)
	}
	if h.d.Stats.OptOutsIgnored.Load() != 3 || h.d.Stats.OptOuts.Load() != 0 {
		t.Fatalf("ignored %d, listed %d", h.d.Stats.OptOutsIgnored.Load(), h.d.Stats.OptOuts.Load())
	}
	if r := h.state("u1").GetCalls()[0]; r.GetOutcome() != pb.Outcome_OUTCOME_PLACED || r.GetFinal() {
		t.Fatalf("record %v", r)
	}
}

// An opt-out that comes after the call's final outcome (callbacks out of
// order) still lists the number; its result is not final (the final one
// was published). A replay of a recorded opt-out after a crash lists it
// again (the entry may not have reached Kafka).
func TestOptOutAfterTheFinalOutcomeAndReplayed(t *testing.T) {
	h := setup(t, &recorder{answer: provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED, ProviderCallID: "CA-c1"}}, 2, withNumberKey)
	sup := h.tt.NewQueueTracker(string(h.topics.Suppressions))
	h.call("u1", "c1")
	h.idle()
	ctx := context.Background()
	if err := h.d.Publish(ctx, status("u1", "c1", pb.Outcome_OUTCOME_ANSWERED, true)); err != nil {
		t.Fatal(err)
	}
	h.allResults()
	if err := h.d.Publish(ctx, status("u1", "c1", pb.Outcome_OUTCOME_OPTED_OUT, true)); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, sup); len(got) != 1 {
		t.Fatalf("entries %v", got)
	}
	res := h.allResults()
	if len(res) != 1 || res[0].GetOutcome() != pb.Outcome_OUTCOME_OPTED_OUT || res[0].GetFinal() {
		t.Fatalf("results %v", res)
	}
	r := h.state("u1").GetCalls()[0]
	if r.GetOutcome() != pb.Outcome_OUTCOME_OPTED_OUT {
		t.Fatalf("record %v", r)
	}
	// Replayed: at or below the offset the record holds.
	r.StatusOffset = 1 << 40
	h.tt.SetTableValue(h.topics.DialerTable(), "u1", &pb.DialerState{Calls: []*pb.DialRecord{r}})
	h.tt.Consume(string(h.topics.DialerLoop()), "u1", &pb.CallStatus{CallId: "c1", UserId: "u1", Outcome: pb.Outcome_OUTCOME_OPTED_OUT, Final: true})
	if got := entries(t, sup); len(got) != 1 {
		t.Fatalf("entries after the replay %v", got)
	}
}

// The webhook path end to end: the endpoint's signed callback with the
// outcome "opted_out" reaches the dialer, which lists the number it placed
// the call to, not the one the body names.
func TestWebhookOptOutListsTheCalledNumber(t *testing.T) {
	h := setup(t, &recorder{answer: provider.Result{Outcome: pb.Outcome_OUTCOME_PLACED}}, 2, withNumberKey)
	sup := h.tt.NewQueueTracker(string(h.topics.Suppressions))
	h.call("u1", "c1") // +14155550123
	h.idle()
	secret, now := []byte("s3cret"), time.Now()
	cb := &webhook.Callback{Secret: secret, CallbackEndpoint: provider.CallbackEndpoint{Sink: h.d}}
	body := `{"call_id":"c1","user_id":"u1","outcome":"opted_out","phone":"+14155550199"}`
	req := httptest.NewRequest(http.MethodPost, webhook.CallbackPath, strings.NewReader(body))
	req.Header.Set(webhook.SignatureHeader, webhook.Sign(secret, now, []byte(body)))
	w := httptest.NewRecorder()
	cb.ServeHTTP(w, req)
	if w.Code != http.StatusNoContent {
		t.Fatalf("callback: %d %s", w.Code, w.Body)
	}
	got := entries(t, sup)
	if len(got) != 1 || got[hex.EncodeToString(numberKey("+14155550123"))] == nil {
		t.Fatalf("entries %v, want the called number's only", got)
	}
	var final *pb.CallResult
	for _, r := range h.allResults() {
		if r.GetFinal() {
			final = r
		}
	}
	if final.GetOutcome() != pb.Outcome_OUTCOME_OPTED_OUT {
		t.Fatalf("final result %v", final)
	}
}
