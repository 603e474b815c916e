package deadletter

import (
	"errors"
	"testing"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

func TestRecordKeepsHeadersAndCountsReplays(t *testing.T) {
	e := Entry{Replays: 1, Letter: &pb.DeadLetter{Reason: "invalid_phone", SourceTopic: "onboarding", Key: []byte("u1"), Value: []byte("v"),
		Headers: []*pb.Header{{Key: "trace", Value: []byte("abc")}, {Key: HeaderReplays, Value: []byte("1")}}}}
	m := Record(e)
	got := map[string]string{}
	for _, h := range m.Headers {
		if _, dup := got[string(h.Key)]; dup {
			t.Fatalf("header %s twice", h.Key)
		}
		got[string(h.Key)] = string(h.Value)
	}
	if m.Topic != "onboarding" || got["trace"] != "abc" || got[HeaderReplays] != "2" || len(got) != 2 {
		t.Fatalf("record to %s with headers %v", m.Topic, got)
	}
	replayable := map[string]bool{"onboarding": true}
	if err := Replayable(e, replayable); err != nil {
		t.Fatal(err)
	}
	for _, dl := range []*pb.DeadLetter{{Reason: string(ReasonUnreadableState), SourceTopic: "onboarding"}, {Reason: "undecodable", SourceTopic: "ivr-scheduler-ticks"}} {
		if err := Replayable(Entry{Letter: dl}, replayable); !errors.Is(err, ErrNotReplayable) {
			t.Errorf("%v: %v, want ErrNotReplayable", dl, err)
		}
	}
}
