package dialer

import (
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/processors/dialer/placement"
)

// list is a do-not-call list by number (the dialer sees numbers; the
// keyed hash is internal/suppress's, tested there).
type list struct {
	mu      sync.Mutex
	entries map[string]*pb.Suppression
}

func (l *list) Check(number, _ string) (*pb.Suppression, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.entries[number], nil
}

// A call fired before its number was listed is not placed: the provider
// never sees it, ivr-results has its final OUTCOME_SUPPRESSED with the
// entry's reason, and the scheduler is told (a CallEnded, whatever the
// policy), which reports the follow-up KIND_SUPPRESSED. Another number
// is placed.
func TestSuppressedAfterFiringIsNotPlaced(t *testing.T) {
	rec := &recorder{}
	l := &list{entries: map[string]*pb.Suppression{
		"+14155550123": {Reason: "opted out", AddedAt: timestamppb.New(time.Unix(1e9, 0))},
	}}
	h := setupPlacer(t, rec, 2, func(c *placement.Config) { c.Suppressions = l })
	h.call("u1", "c1") // +14155550123
	other := call("u2", "c2")
	other.Phone = "+14155550124"
	h.tt.Consume(string(h.topics.Calls), "u2", other)
	h.idle()
	if got := rec.seen(); len(got) != 1 || got[0] != "c2" {
		t.Fatalf("provider saw %v, want only c2", got)
	}
	var suppressed *pb.CallResult
	for _, r := range h.allResults() {
		if r.GetCallId() == "c1" {
			suppressed = r
		}
	}
	if suppressed.GetOutcome() != pb.Outcome_OUTCOME_SUPPRESSED || !suppressed.GetFinal() || !strings.Contains(suppressed.GetDetail(), "opted out") {
		t.Fatalf("result of c1: %v", suppressed)
	}
	ended := h.ended(t)
	if len(ended) != 1 || ended[0].GetCallId() != "c1" || ended[0].GetOutcome() != pb.Outcome_OUTCOME_SUPPRESSED {
		t.Fatalf("reported to the scheduler: %v", ended)
	}
	if st := h.state("u1"); len(st.GetCalls()) != 1 || st.GetCalls()[0].GetOutcome() != pb.Outcome_OUTCOME_SUPPRESSED {
		t.Fatalf("u1's value %v", st)
	}
	if h.p.Stats.Suppressed.Load() != 1 || h.d.Stats.Placed.Load() != 1 {
		t.Fatalf("suppressed %d, placed %d; want 1 and 1", h.p.Stats.Suppressed.Load(), h.d.Stats.Placed.Load())
	}
}
