package explain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

var ber = func() *time.Location {
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	return loc
}()

// local is a Berlin wall time on 10 March 2027 ("15:04:05").
func local(s string) time.Time {
	t, err := time.ParseInLocation("2006-01-02 15:04:05", "2027-03-10 "+s, ber)
	if err != nil {
		panic(err)
	}
	return t
}

func tsp(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// facts is a recorder of a user's records, offsets counted per topic.
type facts struct {
	Facts
	off map[string]int64
}

func newFacts(user string) *facts {
	return &facts{Facts: Facts{User: user, Partition: 3, Since: local("00:00:00"), Read: local("23:00:00")}, off: map[string]int64{}}
}

func (f *facts) pos(topic string, at time.Time) Pos {
	f.off[topic]++
	return Pos{Topic: topic, Partition: 3, Offset: f.off[topic], Time: at}
}

func (f *facts) command(at time.Time, c *pb.Command) Pos {
	p := f.pos("onboarding", at)
	f.Commands = append(f.Commands, Fact[*pb.Command]{p, c})
	return p
}

func (f *facts) event(e *pb.ScheduleEvent) {
	f.Events = append(f.Events, Fact[*pb.ScheduleEvent]{f.pos("followup-events", e.GetAt().AsTime()), e})
}

func (f *facts) call(c *pb.IVRCall) {
	f.Calls = append(f.Calls, Fact[*pb.IVRCall]{f.pos("ivr-calls", c.GetFiredAt().AsTime()), c})
}

func (f *facts) result(r *pb.CallResult) {
	f.Results = append(f.Results, Fact[*pb.CallResult]{f.pos("ivr-results", r.GetAt().AsTime()), r})
}

func step(rule string, from, to time.Time) *pb.PolicyStep {
	return &pb.PolicyStep{Rule: rule, From: tsp(from), To: tsp(to)}
}

// summary is a follow-up's steps as "what[/rule] HH:MM:SS" in Berlin time.
func summary(fu FollowUp) string {
	var s []string
	for _, st := range fu.Steps {
		x := st.What
		if st.Rule != "" {
			x += "/" + st.Rule
		}
		s = append(s, x+" "+st.At.In(ber).Format("15:04:05"))
	}
	return strings.Join(s, ", ")
}

// deferredRetried is the story of the system test, recorded: requested at
// 20:59 for 21:30, moved by the window to 22:00 and by the cap to 22:10,
// fired 5 ms late, placed, no answer, retried (at the instant of the final
// result, from another topic), the retry moved by the cap, fired, placed,
// answered.
func deferredRetried() *facts {
	f := newFacts("u42")
	f.command(local("20:59:00"), &pb.Command{UserId: "u42", RequestedAt: tsp(local("20:59:00")), Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
		Phone: "+4915112345678", TimeZone: "Europe/Berlin",
		FollowUps: []*pb.FollowUp{{TaskId: "welcome", When: &pb.FollowUp_Delay{Delay: durationpb.New(31 * time.Minute)}, Action: &pb.Action{CampaignId: "spring"}}},
	}}})
	f.event(&pb.ScheduleEvent{UserId: "u42", TaskId: "welcome", Kind: pb.ScheduleEvent_KIND_DEFERRED, At: tsp(local("20:59:00")),
		RequestedAt: tsp(local("21:30:00")), DueAt: tsp(local("22:10:00")), Reason: "window", PolicyVersion: "v1",
		Steps: []*pb.PolicyStep{step("window", local("21:30:00"), local("22:00:00")), step("cap", local("22:00:00"), local("22:10:00"))}})
	f.call(&pb.IVRCall{CallId: "c1", UserId: "u42", TaskId: "welcome", Attempt: 1, Phone: "+4915112345678", DueAt: tsp(local("22:10:00")), FiredAt: tsp(local("22:10:00").Add(5 * time.Millisecond))})
	f.result(&pb.CallResult{CallId: "c1", UserId: "u42", TaskId: "welcome", Attempt: 1, Outcome: pb.Outcome_OUTCOME_PLACED, ProviderCallId: "CA1", At: tsp(local("22:10:01"))})
	f.result(&pb.CallResult{CallId: "c1", UserId: "u42", TaskId: "welcome", Attempt: 1, Outcome: pb.Outcome_OUTCOME_NO_ANSWER, Final: true, Detail: "rang at +4915112345678", At: tsp(local("22:10:31"))})
	f.event(&pb.ScheduleEvent{UserId: "u42", TaskId: "welcome", Kind: pb.ScheduleEvent_KIND_RETRY, At: tsp(local("22:10:31")), CallId: "c1", Reason: "no-answer",
		RequestedAt: tsp(local("22:11:00")), DueAt: tsp(local("22:20:00"))})
	f.event(&pb.ScheduleEvent{UserId: "u42", TaskId: "welcome", Kind: pb.ScheduleEvent_KIND_DEFERRED, At: tsp(local("22:10:31")),
		RequestedAt: tsp(local("22:11:00")), DueAt: tsp(local("22:20:00")), Reason: "cap", PolicyVersion: "v1",
		Steps: []*pb.PolicyStep{step("cap", local("22:11:00"), local("22:20:00"))}})
	f.call(&pb.IVRCall{CallId: "c2", UserId: "u42", TaskId: "welcome", Attempt: 2, DueAt: tsp(local("22:20:00")), FiredAt: tsp(local("22:20:00").Add(3 * time.Millisecond))})
	f.result(&pb.CallResult{CallId: "c2", UserId: "u42", TaskId: "welcome", Attempt: 2, Outcome: pb.Outcome_OUTCOME_PLACED, ProviderCallId: "CA2", At: tsp(local("22:20:01"))})
	f.result(&pb.CallResult{CallId: "c2", UserId: "u42", TaskId: "welcome", Attempt: 2, Outcome: pb.Outcome_OUTCOME_ANSWERED, Final: true, At: tsp(local("22:20:40"))})
	f.event(&pb.ScheduleEvent{UserId: "u42", TaskId: "welcome", Kind: pb.ScheduleEvent_KIND_ANSWERED, At: tsp(local("22:20:40")), CallId: "c2", Reason: "answered"})
	return f
}

// The trail of a follow-up deferred by the window, moved by the cap,
// retried after no answer and answered: every step in order, each move
// with its rule, the fires with their call ids and lateness, the
// provider's ids, the final outcome.
func TestTrailOfADeferredRetriedFollowUp(t *testing.T) {
	f := deferredRetried()
	tr := Build(f.Facts)
	if tr.Zone != "Europe/Berlin" || len(tr.FollowUps) != 1 {
		t.Fatalf("zone %s, %d follow-ups", tr.Zone, len(tr.FollowUps))
	}
	fu := tr.FollowUps[0]
	want := "requested 20:59:00, moved/window 20:59:00, moved/cap 20:59:00, fired 22:10:00, placed 22:10:01, final 22:10:31, retry 22:10:31, moved/cap 22:10:31, " +
		"fired 22:20:00, placed 22:20:01, final 22:20:40, answered 22:20:40"
	if got := summary(fu); got != want {
		t.Fatalf("steps\n got %s\nwant %s", got, want)
	}
	if fu.Outcome != "answered" || fu.Task != "welcome" {
		t.Errorf("outcome %q of %q", fu.Outcome, fu.Task)
	}
	s := fu.Steps
	if !s[0].To.Equal(local("21:30:00")) || s[0].AtLocal != "2027-03-10 20:59:00 CET" {
		t.Errorf("requested for %v at %s, want 21:30 CET at 20:59 CET", s[0].To, s[0].AtLocal)
	}
	if !s[1].From.Equal(local("21:30:00")) || !s[1].To.Equal(local("22:00:00")) || !s[2].To.Equal(local("22:10:00")) || !strings.Contains(s[1].Detail, "policy v1") {
		t.Errorf("moves %+v, %+v", s[1], s[2])
	}
	if s[3].CallID != "c1" || s[3].Attempt != 1 || s[3].Lateness == nil || time.Duration(*s[3].Lateness) != 5*time.Millisecond {
		t.Errorf("fire %+v", s[3])
	}
	if s[4].ProviderCallID != "CA1" || s[5].Outcome != "no-answer" || s[6].Outcome != "no-answer" || !s[6].To.Equal(local("22:11:00")) {
		t.Errorf("placement %+v, final %+v, retry %+v", s[4], s[5], s[6])
	}
	if strings.Contains(s[5].Detail, "15112345678") {
		t.Errorf("a provider's detail shows the number: %q", s[5].Detail)
	}
	var text bytes.Buffer
	if err := tr.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"Follow-up welcome: answered",
		"requested for 2027-03-10T20:30:00Z (2027-03-10 21:30:00 CET); a delay of 31m0s from the command's issue time, campaign spring",
		"moved by window: 2027-03-10T20:30:00Z (2027-03-10 21:30:00 CET) -> 2027-03-10T21:00:00Z (2027-03-10 22:00:00 CET); policy v1",
		"moved by cap: 2027-03-10T21:00:00Z (2027-03-10 22:00:00 CET) -> 2027-03-10T21:10:00Z (2027-03-10 22:10:00 CET)",
		"fired call c1 (attempt 1), effective 2027-03-10T21:10:00Z (2027-03-10 22:10:00 CET), 5ms late",
		"placed call c1, provider call CA1",
		"retry after no-answer: next attempt requested for 2027-03-10T21:11:00Z",
		"final answered of call c2",
		"[ivr-calls/3@2]",
	} {
		if !strings.Contains(text.String(), line) {
			t.Errorf("the text lacks %q:\n%s", line, text.String())
		}
	}
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("15112345678")) || bytes.Contains(text.Bytes(), []byte("15112345678")) {
		t.Errorf("the trail holds the phone number:\n%s", b)
	}
	if !bytes.Contains(b, []byte(`"lateness":"5ms"`)) || !bytes.Contains(b, []byte(`"rule":"cap"`)) {
		t.Errorf("JSON %s", b)
	}
	var back Trail
	if err := json.Unmarshal(b, &back); err != nil || len(back.FollowUps) != 1 || summary(back.FollowUps[0]) != want || time.Duration(*back.FollowUps[0].Steps[3].Lateness) != 5*time.Millisecond {
		t.Errorf("the JSON does not read back: %v", err)
	}
}

// A rejected Onboard names its dead letter's reason; a pending follow-up
// shows where the scheduler's table has it now; a policy change that
// placed a follow-up again is a step of its own; a Forget ends them all.
func TestTrailRejectedPendingPolicyChangeForgotten(t *testing.T) {
	f := newFacts("u7")
	rej := f.command(local("09:00:00"), &pb.Command{UserId: "u7", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+491",
		FollowUps: []*pb.FollowUp{{TaskId: "bad", When: &pb.FollowUp_DueAt{DueAt: tsp(local("10:00:00"))}}}}}})
	f.DeadLetters = append(f.DeadLetters, Fact[*pb.DeadLetter]{f.pos("scheduler-dlq", local("09:00:01")), &pb.DeadLetter{
		Reason: "invalid_phone", Detail: "+4915112345678 is not a number in use", SourceTopic: "onboarding", SourcePartition: 3, SourceOffset: rej.Offset, At: tsp(local("09:00:01"))}})
	f.command(local("09:05:00"), &pb.Command{UserId: "u7", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345678",
		FollowUps: []*pb.FollowUp{{When: &pb.FollowUp_DueAt{DueAt: tsp(local("12:00:00"))}}}}}})
	f.event(&pb.ScheduleEvent{UserId: "u7", TaskId: "followup-1", Kind: pb.ScheduleEvent_KIND_DEFERRED, At: tsp(local("11:00:00")),
		Reason: "window", PolicyVersion: "v1", Steps: []*pb.PolicyStep{step("window", local("12:00:00"), local("13:00:00"))}})
	f.event(&pb.ScheduleEvent{UserId: "u7", TaskId: "followup-1", Kind: pb.ScheduleEvent_KIND_DEFERRED, At: tsp(local("13:00:00")),
		Reason: "blackout", Blackout: "holiday", RequestedAt: tsp(local("12:00:00")), DueAt: tsp(local("14:00:00"))}) // an older scheduler: no steps
	f.Scheduler = &pb.UserState{UserId: "u7", TimeZone: "Europe/Berlin", Pending: []*pb.Task{{TaskId: "followup-1", Attempt: 1,
		RequestedAt: tsp(local("12:00:00")), DueAt: tsp(local("14:00:00")), Deferred: "blackout", Blackout: "holiday", PolicyVersion: "v2"}}}
	tr := Build(f.Facts)
	if len(tr.FollowUps) != 2 {
		t.Fatalf("%d follow-ups: %+v", len(tr.FollowUps), tr.FollowUps)
	}
	bad, pending := tr.FollowUps[0], tr.FollowUps[1]
	if summary(bad) != "requested 09:00:00, rejected 09:00:01" || bad.Outcome != "rejected" || !strings.Contains(bad.Steps[1].Detail, "invalid_phone") {
		t.Errorf("rejected follow-up: %s, %q, %+v", summary(bad), bad.Outcome, bad.Steps)
	}
	if strings.Contains(bad.Steps[1].Detail, "15112345678") {
		t.Errorf("the dead letter's detail shows the number: %q", bad.Steps[1].Detail)
	}
	if got := summary(pending); got != "requested 09:05:00, moved/window 11:00:00, moved/blackout 13:00:00, pending 14:00:00" {
		t.Errorf("pending follow-up: %s", got)
	}
	if !strings.HasPrefix(pending.Outcome, "pending: fires at 2027-03-10T13:00:00Z") {
		t.Errorf("outcome %q", pending.Outcome)
	}
	if d := pending.Steps[2].Detail; !strings.Contains(d, "blackout holiday") || !strings.Contains(d, "not recorded") {
		t.Errorf("a move reported without steps: %q", d)
	}

	// A new policy version places it again; then the user is forgotten.
	f.Scheduler = nil
	f.event(&pb.ScheduleEvent{UserId: "u7", TaskId: "followup-1", Kind: pb.ScheduleEvent_KIND_DEFERRED, At: tsp(local("14:00:00")),
		Reason: "cap", PolicyVersion: "v2", Steps: []*pb.PolicyStep{step("cap", local("14:00:00"), local("15:00:00"))}})
	f.event(&pb.ScheduleEvent{UserId: "u7", Kind: pb.ScheduleEvent_KIND_FORGOTTEN, At: tsp(local("14:30:00"))})
	tr = Build(f.Facts)
	pending = tr.FollowUps[1]
	if got := summary(pending); got != "requested 09:05:00, moved/window 11:00:00, moved/blackout 13:00:00, moved/policy 14:00:00, moved/cap 14:00:00" {
		t.Errorf("after a policy change: %s", got)
	}
	if len(tr.UserSteps) != 1 || tr.UserSteps[0].What != "forgotten" || !strings.HasPrefix(pending.Outcome, "forgotten") {
		t.Errorf("user steps %+v, outcome %q", tr.UserSteps, pending.Outcome)
	}
	if got := tr.Filter("bad"); len(got.FollowUps) != 1 || got.FollowUps[0].Task != "bad" || len(tr.FollowUps) != 2 {
		t.Errorf("filter: %+v (trail %d)", got.FollowUps, len(tr.FollowUps))
	}
}

// A call the dialer rejected names the follow-up and the reason; a
// suppressed follow-up ends suppressed; a trail without any request read
// says so; an unknown zone falls back to UTC and says so.
func TestTrailSuppressedDialerRejectNoRequest(t *testing.T) {
	f := newFacts("u9")
	call := &pb.IVRCall{CallId: "a6899990711e5d1b", UserId: "u9", TaskId: "t", Attempt: 1, Phone: "+4915112345678"}
	raw, _ := proto.Marshal(call)
	f.DeadLetters = append(f.DeadLetters, Fact[*pb.DeadLetter]{f.pos("dialer-dlq", local("10:00:00")), &pb.DeadLetter{
		Reason: "unreadable_state", SourceTopic: "ivr-calls", SourceOffset: 4, Value: raw, At: tsp(local("10:00:00"))}})
	f.event(&pb.ScheduleEvent{UserId: "u9", TaskId: "s", Kind: pb.ScheduleEvent_KIND_SUPPRESSED, At: tsp(local("11:00:00")), Reason: "+4915112345678 asked not to be called", CallId: "c8"})
	tr := Build(f.Facts)
	if tr.Zone != "UTC" || !strings.Contains(tr.ZoneFrom, "no time zone") {
		t.Errorf("zone %s (%s)", tr.Zone, tr.ZoneFrom)
	}
	if len(tr.FollowUps) != 2 || tr.FollowUps[0].Task != "t" || tr.FollowUps[0].Steps[0].CallID != "a6899990711e5d1b" || tr.FollowUps[0].Outcome != "rejected" {
		t.Fatalf("follow-ups %+v", tr.FollowUps)
	}
	// A call id is shown as it is, a number in free text masked.
	if l := tr.FollowUps[0].Steps[0].Line(); !strings.Contains(l, "(call a6899990711e5d1b)") {
		t.Errorf("the rejected call's line %q", l)
	}
	if s := tr.FollowUps[1].Steps[0]; tr.FollowUps[1].Outcome != "suppressed" || !strings.Contains(s.Detail, "do-not-call") || !strings.Contains(s.Detail, "asked not") || strings.Contains(s.Line(), "15112345678") {
		t.Errorf("suppressed: %+v", tr.FollowUps[1])
	}
	if !strings.Contains(strings.Join(tr.Notes, "\n"), "no Onboard of the user was read") {
		t.Errorf("notes %q", tr.Notes)
	}
}

// A trail keeps at most MaxSteps steps, leaving out the oldest follow-ups
// and saying so.
func TestTrailBounded(t *testing.T) {
	f := newFacts("busy")
	for i := 0; i < MaxSteps/2+10; i++ {
		at := local("00:00:00").Add(time.Duration(i) * time.Second)
		f.event(&pb.ScheduleEvent{UserId: "busy", TaskId: fmt.Sprintf("t%05d", i), Kind: pb.ScheduleEvent_KIND_CANCELLED, At: tsp(at)})
		f.event(&pb.ScheduleEvent{UserId: "busy", TaskId: fmt.Sprintf("t%05d", i), Kind: pb.ScheduleEvent_KIND_UNKNOWN_TASK, At: tsp(at)})
	}
	tr := Build(f.Facts)
	if len(tr.FollowUps) != MaxSteps/2 || tr.FollowUps[0].Task != "t00010" || !strings.Contains(strings.Join(tr.Notes, "\n"), "the 10 oldest follow-ups are left out") {
		t.Errorf("%d follow-ups from %s, notes %q", len(tr.FollowUps), tr.FollowUps[0].Task, tr.Notes)
	}
}

// A call or result published again by a replay shows twice, the second
// time saying so.
func TestTrailReplayedCallAndResult(t *testing.T) {
	f := newFacts("u3")
	c := &pb.IVRCall{CallId: "c3", UserId: "u3", TaskId: "t", Attempt: 1, DueAt: tsp(local("10:00:00")), FiredAt: tsp(local("10:00:00"))}
	r := &pb.CallResult{CallId: "c3", UserId: "u3", TaskId: "t", Attempt: 1, Outcome: pb.Outcome_OUTCOME_ANSWERED, Final: true, At: tsp(local("10:00:02"))}
	f.call(c)
	f.result(r)
	f.call(c)
	f.result(r)
	fu := Build(f.Facts).FollowUps[0]
	if got := summary(fu); got != "fired 10:00:00, fired 10:00:00, final 10:00:02, final 10:00:02" {
		t.Fatalf("steps %s", got)
	}
	if fu.Steps[0].Detail != "" || !strings.Contains(fu.Steps[1].Detail, "replay") || fu.Steps[2].Detail != "" || !strings.Contains(fu.Steps[3].Detail, "replay") {
		t.Errorf("details %q %q %q %q", fu.Steps[0].Detail, fu.Steps[1].Detail, fu.Steps[2].Detail, fu.Steps[3].Detail)
	}
	if fu.Outcome != "called: answered" {
		t.Errorf("outcome %q", fu.Outcome)
	}
}
