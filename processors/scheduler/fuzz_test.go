package scheduler

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/phone"
	"github.com/ivrsched/ivrsched/internal/policy"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
)

// fuzzPolicy is the default policy with a spread: effective times move.
var fuzzPolicy = func() *policy.Policy {
	p, err := policy.Parse([]byte("default: {spread: 10m}"))
	if err != nil {
		panic(err)
	}
	return p
}()

// Validation of any command in a record stamped at any time: no panic, and
// what it accepts, the scheduler can apply within the limits measured from
// the record timestamp (the broker's clock), whatever requested_at and
// onboarded_at the producer wrote: every requested time lies in
// [record - MaxSkew - MaxPast, record + MaxSkew + MaxDelay] and survives the
// index's int64 nanoseconds, and the calling policy's effective time is
// not before it and within policy.Horizon; every payload within
// MaxPayload, task ids unique, phone valid in the numbering plan when
// given, with a zone.
func FuzzValidate(f *testing.F) {
	seed := func(c *pb.Command, recordSec int64) {
		b, _ := proto.Marshal(c)
		f.Add("u1", b, recordSec)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	y2300 := timestamppb.New(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC))
	seed(&pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+14155550123", TimeZone: "Europe/Berlin"}}}, now.Unix())
	seed(&pb.Command{UserId: "u1", Command: &pb.Command_Cancel{Cancel: &pb.Cancel{TaskId: "t"}}}, now.Unix())
	seed(&pb.Command{UserId: "u1", RequestedAt: y2300, Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+14155550123",
		FollowUps: []*pb.FollowUp{{TaskId: "a", When: &pb.FollowUp_DueAt{DueAt: y2300}}}}}}, now.Unix())
	seed(&pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+14155550123", OnboardedAt: y2300,
		FollowUps: []*pb.FollowUp{{TaskId: "a", When: &pb.FollowUp_Delay{Delay: durationpb.New(time.Hour)}}}}}}, now.Unix())
	seed(&pb.Command{UserId: "u1", Command: &pb.Command_Reschedule{Reschedule: &pb.Reschedule{TaskId: "a", When: &pb.Reschedule_DueAt{DueAt: y2300}}}}, y2300.GetSeconds())
	seed(&pb.Command{UserId: "u1", RequestedAt: y2300, Command: &pb.Command_CallEnded{CallEnded: &pb.CallEnded{TaskId: "a", CallId: "c", Attempt: 1,
		Outcome: pb.Outcome_OUTCOME_NO_ANSWER}}}, now.Unix())
	f.Add("", []byte{0xff}, int64(1))
	lim := Limits{MaxDelay: 400 * 24 * time.Hour, MaxPast: 24 * time.Hour, PastDue: PastDueReject, MaxPayload: 1024, MaxSkew: 24 * time.Hour}
	f.Fuzz(func(t *testing.T, key string, data []byte, recordSec int64) {
		var cmd pb.Command
		if proto.Unmarshal(data, &cmd) != nil {
			return
		}
		record := time.Unix(recordSec%(1<<36), 0).UTC()
		lo, hi := record.Add(-lim.MaxSkew-lim.MaxPast), record.Add(lim.MaxSkew+lim.MaxDelay)
		inBounds := func(due time.Time) bool {
			return !due.Before(lo) && !due.After(hi) && time.Unix(0, due.UnixNano()).Equal(due)
		}
		user, issued, err := Validate(key, &cmd, record, lim)
		if err != nil {
			if _, ok := err.(*RejectError); !ok {
				t.Fatalf("error %T is not a RejectError", err)
			}
			return
		}
		if user == "" || (key != "" && user != key) {
			t.Fatalf("accepted user %q for key %q", user, key)
		}
		if r := cmd.GetReschedule(); r != nil {
			if due := dueTime(r.GetDelay(), r.GetDueAt(), issued); !inBounds(due) {
				t.Fatalf("accepted reschedule to %v in a record stamped %v", due, record)
			}
		}
		if e := cmd.GetCallEnded(); e != nil {
			// The latest retry it can bring, and the earliest.
			if !inBounds(issued.Add(policy.MaxRetryDelay)) || !inBounds(issued) || e.GetAttempt() < 1 || e.GetCallId() == "" || e.GetTaskId() == "" {
				t.Fatalf("accepted %v issued %v in a record stamped %v", e, issued, record)
			}
		}
		o := cmd.GetOnboard()
		if o == nil {
			return
		}
		c, err := validate(key, &cmd, record, lim)
		if err != nil {
			t.Fatalf("Validate accepted what validate rejects: %v", err)
		}
		if o.GetPhone() != "" {
			if n, err := phone.Parse(o.GetPhone()); err != nil || (len(n.Zones) == 0 && o.GetTimeZone() == "") || c.number == nil || c.number.E164 != n.E164 {
				t.Fatalf("accepted phone %q (%v, zones %v)", o.GetPhone(), err, n.Zones)
			}
		}
		s := &Scheduler{cfg: Config{Default: DefaultFollowUp{TaskID: "d", Delay: time.Hour}, Limits: lim, Policy: func() *policy.Policy { return fuzzPolicy }}}
		st := &pb.UserState{UserId: user, Phone: "+14155550123", Region: "US", PhoneZones: []string{"America/Los_Angeles"}}
		if err := s.onboard(nil, st, o, c, true); err != nil {
			if _, ok := err.(*RejectError); !ok {
				t.Fatalf("onboard: %v", err)
			}
			return
		}
		ids := map[string]bool{}
		for _, task := range st.GetPending() {
			req, due := task.GetRequestedAt().AsTime(), task.GetDueAt().AsTime()
			if !inBounds(req) {
				t.Fatalf("accepted due %v for a command in a record stamped %v", req, record)
			}
			if due.Before(req) || due.After(req.Add(policy.Horizon)) || task.GetPolicyVersion() != fuzzPolicy.Version() {
				t.Fatalf("effective time %v for requested %v (policy %q)", due, req, task.GetPolicyVersion())
			}
			if len(task.GetPayload()) > lim.MaxPayload || ids[task.GetTaskId()] {
				t.Fatalf("payload %d bytes or duplicate task %q accepted", len(task.GetPayload()), task.GetTaskId())
			}
			ids[task.GetTaskId()] = true
		}
	})
}

// ParseValue on any bytes: no panic; for bytes that decode as a UserState
// it reads exactly the pending and fired follow-ups (with held and deferred
// flags), the mark, and the LastActive the scheduler computes from the
// decoded value.
func FuzzParseValue(f *testing.F) {
	ts := timestamppb.New(time.Unix(1700000000, 5))
	b, _ := proto.Marshal(&pb.UserState{UserId: "u", Pending: []*pb.Task{{TaskId: "a", DueAt: ts, Held: true}, {TaskId: "b", Deferred: "window"}},
		Fired: []*pb.FiredTask{{Task: &pb.Task{TaskId: "c", DueAt: ts}, CallId: "x"}}, UpdatedAt: timestamppb.New(time.Unix(1800000000, 7))})
	f.Add(b)
	b, _ = proto.Marshal(markValue("k", dueindex.Mark{Through: dueindex.Pos{Due: 7, User: "u", Task: "t"}, StagedAt: 3, LastTick: 9, Swept: "v1"}))
	f.Add(b)
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseValue(data)
		var st pb.UserState
		if proto.Unmarshal(data, &st) != nil {
			return // the fast reader may accept what full decoding rejects (e.g. bad UTF-8 elsewhere)
		}
		if err != nil {
			t.Fatalf("decodable state: %v", err)
		}
		task := func(t *pb.Task) dueindex.Task {
			return dueindex.Task{Due: t.GetDueAt().AsTime().UnixNano(), ID: t.GetTaskId(), Held: t.GetHeld(), Deferred: t.GetDeferred() != ""}
		}
		var pending, fired []dueindex.Task
		for _, t := range st.GetPending() {
			pending = append(pending, task(t))
		}
		for _, f := range st.GetFired() {
			fired = append(fired, task(f.GetTask()))
		}
		if v.LastActive != lastActive(&st) {
			t.Fatalf("LastActive %d, want %d", v.LastActive, lastActive(&st))
		}
		if !slices.Equal(v.Pending, pending) || !slices.Equal(v.Fired, fired) {
			t.Fatalf("ParseValue = %v / %v, want %v / %v", v.Pending, v.Fired, pending, fired)
		}
		if (v.Mark != nil) != (st.FiredThrough != nil) {
			t.Fatalf("mark %v, state has %v", v.Mark, st.FiredThrough)
		}
		if m := st.GetFiredThrough(); m != nil {
			want := dueindex.Mark{Through: pos(m.GetThrough()), Staged: pos(m.GetStaged()), StagedAt: m.GetStagedAt().AsTime().UnixNano(),
				Checkpoint: pos(m.GetCheckpoint()), LastTick: m.GetTickOffset(), Swept: m.GetSweptPolicy()}
			if *v.Mark != want {
				t.Fatalf("mark %+v, want %+v", *v.Mark, want)
			}
		}
	})
}
