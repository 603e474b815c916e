package scheduler

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// Validation of any command: no panic, and what it accepts, the scheduler
// can apply within the limits: every due time lies in
// [issued - MaxPast, issued + MaxDelay], every payload within MaxPayload,
// task ids unique, phone E.164 when given.
func FuzzValidate(f *testing.F) {
	seed := func(c *pb.Command) {
		b, _ := proto.Marshal(c)
		f.Add("u1", b, int64(0))
	}
	seed(&pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+14155550123", TimeZone: "Europe/Berlin"}}})
	seed(&pb.Command{UserId: "u1", Command: &pb.Command_Cancel{Cancel: &pb.Cancel{TaskId: "t"}}})
	f.Add("", []byte{0xff}, int64(1))
	lim := Limits{MaxDelay: 400 * 24 * time.Hour, MaxPast: 24 * time.Hour, PastDue: PastDueReject, MaxPayload: 1024}
	f.Fuzz(func(t *testing.T, key string, data []byte, issuedSec int64) {
		var cmd pb.Command
		if proto.Unmarshal(data, &cmd) != nil {
			return
		}
		issued := time.Unix(issuedSec%(1<<33), 0).UTC()
		user, err := Validate(key, &cmd, issued, lim)
		if err != nil {
			if _, ok := err.(*RejectError); !ok {
				t.Fatalf("error %T is not a RejectError", err)
			}
			return
		}
		if user == "" || (key != "" && user != key) {
			t.Fatalf("accepted user %q for key %q", user, key)
		}
		o := cmd.GetOnboard()
		if o == nil {
			return
		}
		if o.GetPhone() != "" && !e164.MatchString(o.GetPhone()) {
			t.Fatalf("accepted phone %q", o.GetPhone())
		}
		s := &Scheduler{cfg: Config{Default: DefaultFollowUp{TaskID: "d", Delay: time.Hour}, Limits: lim}}
		st := &pb.UserState{UserId: user, Phone: "+14155550123"}
		if err := s.onboard(st, o, issued); err != nil {
			if _, ok := err.(*RejectError); !ok {
				t.Fatalf("onboard: %v", err)
			}
			return
		}
		ids := map[string]bool{}
		for _, task := range st.GetPending() {
			due := task.GetDueAt().AsTime()
			if due.Before(issued.Add(-lim.MaxPast)) || due.After(issued.Add(lim.MaxDelay)) {
				t.Fatalf("accepted due %v for a command issued %v", due, issued)
			}
			if len(task.GetPayload()) > lim.MaxPayload || ids[task.GetTaskId()] {
				t.Fatalf("payload %d bytes or duplicate task %q accepted", len(task.GetPayload()), task.GetTaskId())
			}
			ids[task.GetTaskId()] = true
		}
	})
}

// EarliestDue on any bytes: no panic; for bytes that decode as a UserState
// it is exactly the minimum pending due time.
func FuzzEarliestDue(f *testing.F) {
	b, _ := proto.Marshal(&pb.UserState{UserId: "u", Pending: []*pb.Task{{TaskId: "a"}}})
	f.Add(b)
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		due, ok, err := EarliestDue(data)
		var st pb.UserState
		if proto.Unmarshal(data, &st) != nil {
			return // the fast reader may accept what full decoding rejects (e.g. bad UTF-8 elsewhere)
		}
		if err != nil {
			t.Fatalf("decodable state: %v", err)
		}
		var want time.Time
		for i, task := range st.GetPending() {
			if d := task.GetDueAt().AsTime(); i == 0 || d.Before(want) {
				want = d
			}
		}
		if ok != (len(st.GetPending()) > 0) || (ok && !due.Equal(want)) {
			t.Fatalf("EarliestDue = %v %v, want %v for %d pending", due, ok, want, len(st.GetPending()))
		}
	})
}
