package dialer

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// After a rebalance the Forget is processed on another host than the one
// that fired the user's last call, whose clock runs 5 s ahead: by the
// clocks the call was fired after the Forget. The partition's order says
// otherwise (the value it was fired from was created before the Forget),
// so it is not placed after the erase and no dialer value of the user is
// made again; a call fired from a value created after the Forget is
// placed, though the host that fired it runs 5 s behind. Before, fired_at
// was compared with the Forget's time: the first call was placed (and
// recreated the value), the second dropped.
func TestForgetDecidesByThePartitionsOrderNotByClocks(t *testing.T) {
	rec := &recorder{}
	h := setup(t, rec, 1)
	forgot := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	// The Forget is the record at offset 41 of the onboarding partition.
	h.tt.Consume(string(h.topics.Events), "u1", &pb.ScheduleEvent{UserId: "u1", Kind: pb.ScheduleEvent_KIND_FORGOTTEN,
		At: timestamppb.New(forgot), ForgetOffset: 42})
	before := call("u1", "before") // from a value onboarded at offset 7
	before.FiredAt, before.CreatedOffset = timestamppb.New(forgot.Add(5*time.Second)), 8
	h.tt.Consume(string(h.topics.Calls), "u1", before)
	h.idle()
	if got := rec.seen(); len(got) != 0 || h.state("u1") != nil || h.d.Stats.FiredBeforeForget.Load() != 1 {
		t.Fatalf("placed %v, u1's value %v, %d dropped: the call fired before the Forget was placed after it",
			got, h.state("u1"), h.d.Stats.FiredBeforeForget.Load())
	}
	after := call("u1", "after") // onboarded again at offset 50
	after.FiredAt, after.CreatedOffset = timestamppb.New(forgot.Add(-5*time.Second)), 51
	h.tt.Consume(string(h.topics.Calls), "u1", after)
	h.idle()
	if got := rec.seen(); !slices.Equal(got, []string{"after"}) {
		t.Fatalf("placed %v, want the call fired after the Forget", got)
	}
}

// A Forget without a place (the scheduler sends none for a value created
// before the onboarding offsets started again) drops a call of its user
// whatever place the call carries.
func TestForgetWithoutAPlaceDropsEveryCallOfItsUser(t *testing.T) {
	rec := &recorder{}
	h := setup(t, rec, 1)
	h.tt.Consume(string(h.topics.Events), "u1", &pb.ScheduleEvent{UserId: "u1", Kind: pb.ScheduleEvent_KIND_FORGOTTEN, At: timestamppb.Now()})
	old := call("u1", "old")
	old.CreatedOffset = 1_000_000
	h.tt.Consume(string(h.topics.Calls), "u1", old)
	h.call("u2", "other")
	h.idle()
	if got := rec.seen(); !slices.Equal(got, []string{"other"}) || h.state("u1") != nil {
		t.Fatalf("placed %v, u1's value %v: want u1's call dropped", got, h.state("u1"))
	}
}
