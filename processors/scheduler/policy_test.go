package scheduler

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/policy"
)

// withPolicy makes the scheduler read its policy from p (nil: none).
func withPolicy(p *atomic.Pointer[policy.Policy]) func(*Config) {
	return func(c *Config) { c.Policy = p.Load }
}

func mustPolicy(t *testing.T, doc string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newPolicyHarness starts the scheduler under the policy doc, with its
// clock at start.
func newPolicyHarness(t *testing.T, doc string, start time.Time) (*harness, *atomic.Pointer[policy.Policy]) {
	t.Helper()
	var p atomic.Pointer[policy.Policy]
	p.Store(mustPolicy(t, doc))
	h := newHarness(t, withPolicy(&p))
	h.clk.Jump(start)
	return h, &p
}

// onboardUser onboards user with a phone and a time zone ("": the number's).
func (h *harness) onboardUser(user, phone, tz string, f ...*pb.FollowUp) {
	h.t.Helper()
	h.send(user, &pb.Command{UserId: user, Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: phone, TimeZone: tz, FollowUps: f}}})
}

// tickTime moves the clock to at and processes a tick.
func (h *harness) tickTime(at time.Time) {
	h.t.Helper()
	h.clk.Set(at)
	h.tt.Consume(string(h.topics.Ticks), tickKey, &pb.Tick{Partition: 0, SentAt: timestamppb.New(at)})
}

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func (h *harness) task(user, id string) *pb.Task {
	h.t.Helper()
	for _, t := range h.state(user).GetPending() {
		if t.GetTaskId() == id {
			return t
		}
	}
	h.t.Fatalf("user %s has no pending task %s: %v", user, id, h.state(user))
	return nil
}

// deferredEvents drains the events and returns the KIND_DEFERRED ones.
func (h *harness) deferredEvents() []*pb.ScheduleEvent {
	var out []*pb.ScheduleEvent
	for _, e := range h.nextEvents() {
		if e.GetKind() == pb.ScheduleEvent_KIND_DEFERRED {
			out = append(out, e)
		}
	}
	return out
}

const spreadPolicy = `
default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "08:00", to: "21:00"}]
  spread: 10m
`

// The first case: a user in Los Angeles (the zone comes from the
// number) onboarded at 23:00 local with a 1 h delay is called at 08:00
// local plus its spread, not at midnight; the value and the event say why.
func TestLateOnboardingInLosAngelesIsCalledAtTheOpening(t *testing.T) {
	la := zone(t, "America/Los_Angeles")
	h, _ := newPolicyHarness(t, spreadPolicy, time.Date(2026, 7, 14, 23, 0, 0, 0, la))
	h.onboardUser("u1", "+14155550100", "", delay("welcome", time.Hour))

	st := h.state("u1")
	if st.GetRegion() != "US" || len(st.GetPhoneZones()) != 1 || st.GetPhoneZones()[0] != "America/Los_Angeles" || st.GetTimeZone() != "" {
		t.Fatalf("region %q zones %v tz %q, want US, [America/Los_Angeles] and no tz", st.GetRegion(), st.GetPhoneZones(), st.GetTimeZone())
	}
	task := h.task("u1", "welcome")
	req, due := task.GetRequestedAt().AsTime().In(la), task.GetDueAt().AsTime().In(la)
	opening := time.Date(2026, 7, 15, 8, 0, 0, 0, la)
	if !req.Equal(time.Date(2026, 7, 15, 0, 0, 0, 0, la)) || due.Before(opening) || !due.Before(opening.Add(10*time.Minute)) {
		t.Fatalf("requested %v, effective %v; want 00:00 and 08:00 plus under 10m", req, due)
	}
	if task.GetDeferred() != "window" || task.GetPolicyVersion() == "" {
		t.Fatalf("deferred %q, policy %q", task.GetDeferred(), task.GetPolicyVersion())
	}
	ev := h.deferredEvents()
	if len(ev) != 1 || ev[0].GetReason() != "window" || !ev[0].GetRequestedAt().AsTime().Equal(req) || !ev[0].GetDueAt().AsTime().Equal(due) {
		t.Fatalf("deferral events %v", ev)
	}
	// The query page shows the same.
	if got := h.s.Settled(st).GetPending()[0]; got.GetDeferred() != "window" || !got.GetDueAt().AsTime().Equal(due) {
		t.Fatalf("query page shows %v", got)
	}

	h.tickTime(req.Add(time.Minute)) // the requested time: nothing
	h.tickTime(due.Add(-time.Second))
	h.expectCalls()
	h.tickTime(due)
	c := h.expectCalls("welcome")[0]
	if !c.GetDueAt().AsTime().Equal(due) || c.GetCallId() != CallID("u1", task) {
		t.Fatalf("call due %v id %s", c.GetDueAt().AsTime(), c.GetCallId())
	}
	// The id comes from the requested time: the policy's move keeps it.
	if CallID("u1", &pb.Task{TaskId: "welcome", DueAt: timestamppb.New(req), Attempt: 1}) != c.GetCallId() {
		t.Fatal("the call id depends on the effective time")
	}
}

// A follow-up due on a blackout date of the user's region moves to the next
// open day's opening; the blackout is named.
func TestBlackoutMovesToTheNextOpenDay(t *testing.T) {
	ny := zone(t, "America/New_York")
	h, _ := newPolicyHarness(t, `
default:
  blackouts:
    - {name: christmas, from: 2026-12-25, to: 2026-12-25, regions: [US]}
    - {name: elsewhere, from: 2026-12-26, to: 2026-12-26, regions: [DE]}
`, time.Date(2026, 12, 20, 12, 0, 0, 0, ny))
	h.onboardUser("u1", "+12125550123", "", at("gift", time.Date(2026, 12, 25, 10, 0, 0, 0, ny)))
	task := h.task("u1", "gift")
	if want := time.Date(2026, 12, 26, 8, 0, 0, 0, ny); !task.GetDueAt().AsTime().Equal(want) || task.GetDeferred() != "blackout" || task.GetBlackout() != "christmas" {
		t.Fatalf("due %v, %s %s; want %v, blackout christmas", task.GetDueAt().AsTime().In(ny), task.GetDeferred(), task.GetBlackout(), want)
	}
	if ev := h.deferredEvents(); len(ev) != 1 || ev[0].GetBlackout() != "christmas" || ev[0].GetReason() != "blackout" {
		t.Fatalf("events %v", ev)
	}
	h.tickTime(time.Date(2026, 12, 25, 10, 0, 0, 0, ny))
	h.expectCalls()
	h.tickTime(time.Date(2026, 12, 26, 8, 0, 0, 0, ny))
	h.expectCalls("gift")
}

// DST: an opening at a wall time the spring-forward change skips is the
// first instant after the gap; a wall time the fall-back change repeats
// happens once. In New York, Berlin, Lord Howe (30-minute DST) and Kolkata
// (none), with the user's own zone.
func TestOpeningsAcrossDST(t *testing.T) {
	cases := []struct {
		zone  string
		phone string
		open  string    // the window's opening, local
		due   time.Time // requested, before the opening
		want  time.Time // the effective time
	}{
		// 02:30 does not exist on 8 March 2026 in New York: 03:00 EDT.
		{"America/New_York", "+12125550123", "02:30", time.Date(2026, 3, 8, 1, 0, 0, 0, zone(t, "America/New_York")), time.Date(2026, 3, 8, 3, 0, 0, 0, zone(t, "America/New_York"))},
		// 01:30 happens twice on 1 November 2026: the first, EDT.
		{"America/New_York", "+12125550123", "01:30", time.Date(2026, 11, 1, 0, 0, 0, 0, zone(t, "America/New_York")), time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC)},
		// Berlin skips 02:00-03:00 on 29 March 2026.
		{"Europe/Berlin", "+4915112345678", "02:30", time.Date(2026, 3, 29, 0, 0, 0, 0, zone(t, "Europe/Berlin")), time.Date(2026, 3, 29, 3, 0, 0, 0, zone(t, "Europe/Berlin"))},
		// Lord Howe skips 02:00-02:30 on 4 October 2026.
		{"Australia/Lord_Howe", "+61291234005", "02:15", time.Date(2026, 10, 4, 0, 0, 0, 0, zone(t, "Australia/Lord_Howe")), time.Date(2026, 10, 4, 2, 30, 0, 0, zone(t, "Australia/Lord_Howe"))},
		// Kolkata has no DST: 02:30 is 02:30.
		{"Asia/Kolkata", "+919876543210", "02:30", time.Date(2026, 3, 8, 0, 0, 0, 0, zone(t, "Asia/Kolkata")), time.Date(2026, 3, 8, 2, 30, 0, 0, zone(t, "Asia/Kolkata"))},
	}
	for _, c := range cases {
		t.Run(c.zone+"-"+c.open, func(t *testing.T) {
			h, _ := newPolicyHarness(t, `{default: {open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "`+c.open+`", to: "12:00"}]}}`, c.due.Add(-time.Hour))
			h.onboardUser("u1", c.phone, c.zone, at("a", c.due))
			task := h.task("u1", "a")
			if !task.GetDueAt().AsTime().Equal(c.want) || task.GetDeferred() != "window" {
				t.Fatalf("effective %v (%s), want %v", task.GetDueAt().AsTime().In(zone(t, c.zone)), task.GetDeferred(), c.want.In(zone(t, c.zone)))
			}
			h.tickTime(c.want.Add(-time.Second))
			h.expectCalls()
			h.tickTime(c.want)
			h.expectCalls("a")
			h.tickTime(c.want.Add(time.Hour)) // the repeated hour passes: once
			h.expectCalls()
		})
	}
}

// A frequency cap of one call a day defers the second follow-up of the day
// to when the first is a day old, inside the next day's window.
func TestCapDefersTheSecondCallToTheNextDay(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	day := time.Date(2026, 6, 10, 0, 0, 0, 0, berlin)
	h, _ := newPolicyHarness(t, `{default: {cap: {calls: 1, per: 24h}}}`, day.Add(9*time.Hour))
	h.onboardUser("u1", "+4915112345678", "", at("first", day.Add(10*time.Hour)), at("second", day.Add(15*time.Hour)))
	if first := h.task("u1", "first"); first.GetDeferred() != "" || !first.GetDueAt().AsTime().Equal(day.Add(10*time.Hour)) {
		t.Fatalf("first %v", first)
	}
	second := h.task("u1", "second")
	if want := day.Add(34 * time.Hour); !second.GetDueAt().AsTime().Equal(want) || second.GetDeferred() != "cap" {
		t.Fatalf("second due %v (%s), want %v (cap)", second.GetDueAt().AsTime().In(berlin), second.GetDeferred(), want)
	}
	h.tickTime(day.Add(10 * time.Hour))
	h.expectCalls("first")
	h.tickTime(day.Add(15 * time.Hour))
	h.expectCalls()
	h.tickTime(day.Add(34 * time.Hour))
	h.expectCalls("second")
}

// No policy: every follow-up fires at its requested time, whatever the hour.
func TestNoPolicyFiresAtTheRequestedTime(t *testing.T) {
	var p atomic.Pointer[policy.Policy] // nil: none
	h := newHarness(t, withPolicy(&p))
	la := zone(t, "America/Los_Angeles")
	night := time.Date(2026, 7, 15, 3, 0, 0, 0, la)
	h.clk.Jump(night.Add(-time.Hour))
	h.onboardUser("u1", "+14155550100", "", at("a", night))
	if task := h.task("u1", "a"); !task.GetDueAt().AsTime().Equal(night) || task.GetDeferred() != "" || task.GetPolicyVersion() != "" {
		t.Fatalf("task %v", task)
	}
	h.tickTime(night)
	h.expectCalls("a")
}

// With the default policy (nil Config.Policy), 03:00 local is outside
// 08:00-21:00.
func TestDefaultPolicyIsTheDaytimeWindow(t *testing.T) {
	h := newHarness(t)
	la := zone(t, "America/Los_Angeles")
	night := time.Date(2026, 7, 15, 3, 0, 0, 0, la)
	h.clk.Jump(night.Add(-time.Hour))
	h.onboardUser("u1", "+14155550100", "", at("a", night))
	if task := h.task("u1", "a"); !task.GetDueAt().AsTime().Equal(time.Date(2026, 7, 15, 8, 0, 0, 0, la)) || task.GetPolicyVersion() != policy.Default().Version() {
		t.Fatalf("task %v", task)
	}
}

// A number the numbering plan rejects, a zone that does not exist, and a
// number without a zone and no zone given are dead-lettered, each with a
// reason that says so; none falls back to UTC.
func TestNumbersAndZonesAreCheckedNeverUTC(t *testing.T) {
	h := newHarness(t)
	onb := func(phone, tz string) *pb.Command {
		return &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: phone, TimeZone: tz}}}
	}
	h.send("u1", onb("+15555550100", "America/New_York")) // no such area code
	h.send("u1", onb("+14155550100", "Local"))            // the host's zone
	h.send("u1", onb("+80012345678", ""))                 // international freephone: no zone
	h.send("u1", onb("+80012345678", "Europe/Berlin"))    // with a zone: accepted
	dls := h.deadLetters()
	want := []deadletter.Reason{deadletter.ReasonInvalidPhone, deadletter.ReasonUnknownTimeZone, deadletter.ReasonNoTimeZone}
	if len(dls) != len(want) {
		t.Fatalf("dead letters %v", dls)
	}
	for i, d := range dls {
		if d.GetReason() != string(want[i]) {
			t.Errorf("dead letter %d: %s (%s), want %s", i, d.GetReason(), d.GetDetail(), want[i])
		}
	}
	if st := h.state("u1"); st.GetRegion() != "001" || st.GetTimeZone() != "Europe/Berlin" || len(st.GetPending()) != 1 {
		t.Fatalf("state %v", st)
	}
}

// A change of the user's time zone moves pending follow-ups: the windows
// are read in the new zone, from the requested times.
func TestZoneChangeMovesPendingFollowUps(t *testing.T) {
	la := zone(t, "America/Los_Angeles")
	start := time.Date(2026, 7, 14, 12, 0, 0, 0, time.UTC)
	h, _ := newPolicyHarness(t, `{}`, start)
	due := time.Date(2026, 7, 14, 16, 0, 0, 0, time.UTC) // 09:00 in LA, 18:00 in Berlin
	h.onboardUser("u1", "+14155550100", "", at("a", due))
	if task := h.task("u1", "a"); !task.GetDueAt().AsTime().Equal(due) {
		t.Fatalf("due %v", task.GetDueAt().AsTime().In(la))
	}
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{TimeZone: "Asia/Tokyo"}}}) // 01:00 there
	task := h.task("u1", "a")
	tokyo := zone(t, "Asia/Tokyo")
	if want := time.Date(2026, 7, 15, 8, 0, 0, 0, tokyo); !task.GetDueAt().AsTime().Equal(want) || !task.GetRequestedAt().AsTime().Equal(due) {
		t.Fatalf("due %v, want %v", task.GetDueAt().AsTime().In(tokyo), want)
	}
	if ev := h.deferredEvents(); len(ev) != 1 {
		t.Fatalf("events %v", ev)
	}
}

// A reschedule is placed by the policy like a new follow-up, and a cancel of
// a deferred follow-up works as on any other.
func TestRescheduleAndCancelOfDeferredFollowUps(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	day := time.Date(2026, 6, 10, 0, 0, 0, 0, berlin)
	h, _ := newPolicyHarness(t, `{}`, day.Add(6*time.Hour))
	h.onboardUser("u1", "+4915112345678", "", at("a", day.Add(7*time.Hour)), at("b", day.Add(22*time.Hour)))
	if a := h.task("u1", "a"); !a.GetDueAt().AsTime().Equal(day.Add(8 * time.Hour)) {
		t.Fatalf("a due %v", a.GetDueAt().AsTime().In(berlin))
	}
	h.nextEvents()
	h.send("u1", &pb.Command{UserId: "u1", Command: &pb.Command_Reschedule{Reschedule: &pb.Reschedule{TaskId: "a",
		When: &pb.Reschedule_Delay{Delay: durationpb.New(17 * time.Hour)}}}}) // 23:00
	a := h.task("u1", "a")
	if !a.GetRequestedAt().AsTime().Equal(day.Add(23*time.Hour)) || !a.GetDueAt().AsTime().Equal(day.Add(32*time.Hour)) || a.GetDeferred() != "window" {
		t.Fatalf("rescheduled a: requested %v due %v", a.GetRequestedAt().AsTime().In(berlin), a.GetDueAt().AsTime().In(berlin))
	}
	ev := h.nextEvents()
	if len(ev) != 2 || ev[0].GetKind() != pb.ScheduleEvent_KIND_RESCHEDULED || ev[1].GetKind() != pb.ScheduleEvent_KIND_DEFERRED {
		t.Fatalf("events %v", ev)
	}
	h.cancel("u1", "b")
	if ev := h.nextEvents(); len(ev) != 1 || ev[0].GetKind() != pb.ScheduleEvent_KIND_CANCELLED {
		t.Fatalf("events %v", ev)
	}
	h.tickTime(day.Add(33 * time.Hour))
	h.expectCalls("a")
}

// The policy allows no call at all (every day blacked out): the follow-up
// is dead-lettered as no_opening rather than left pending for ever.
func TestNoOpeningIsDeadLettered(t *testing.T) {
	h, _ := newPolicyHarness(t, `{default: {blackouts: [{name: closed, from: 2026-06-01, to: 2027-05-31}, {name: still-closed, from: 2027-06-01, to: 2028-05-30}]}}`, time.Date(2026, 6, 10, 0, 0, 0, 0, time.UTC))
	h.onboardUser("u1", "+4915112345678", "", delay("a", time.Hour))
	if dls := h.deadLetters(); len(dls) != 1 || dls[0].GetReason() != string(deadletter.ReasonNoOpening) {
		t.Fatalf("dead letters %v", dls)
	}
}

// A policy change applies to follow-ups already pending, at fire time: a
// blackout added for tomorrow stops the follow-up due then (the tick parks
// it and its user's callback moves it to the next open day); the one
// before it fires, the one after it waits for the move and fires at the
// next tick; the mark never passes the parked one.
func TestPolicyChangeMovesPendingFollowUps(t *testing.T) {
	day := time.Date(2026, 6, 11, 0, 0, 0, 0, time.UTC)
	h, p := newPolicyHarness(t, `{}`, day.Add(-12*time.Hour))
	old := p.Load().Version()
	h.onboardUser("u2", "+442079460002", "", at("early", day.Add(8*time.Hour)))              // 09:00 London
	h.onboardUser("u1", "+4915112345678", "", at("a", day.Add(8*time.Hour+time.Second)))     // 10:00:01 Berlin
	h.onboardUser("u3", "+442079460002", "", at("late", day.Add(8*time.Hour+2*time.Second))) // 09:00:02 London
	if a := h.task("u1", "a"); a.GetPolicyVersion() != old {
		t.Fatalf("a computed under %q", a.GetPolicyVersion())
	}
	h.nextEvents()

	p.Store(mustPolicy(t, `{default: {blackouts: [{name: holiday, from: 2026-06-11, to: 2026-06-11, regions: [DE]}]}}`))
	h.tickTime(day.Add(8*time.Hour + 2*time.Second))
	h.expectCalls("early")
	if m := h.state(tickKey).GetFiredThrough().GetThrough(); m.GetUserId() != "u2" || m.GetTaskId() != "early" {
		t.Fatalf("mark %v, want at u2/early, before the parked follow-up", m)
	}
	if h.s.Stats.Parked.Load() != 1 {
		t.Fatalf("parked %d", h.s.Stats.Parked.Load())
	}
	// The wake moved it to the next open day (the tester runs loopbacks
	// within the tick's Consume).
	berlin := zone(t, "Europe/Berlin")
	a := h.task("u1", "a")
	if want := time.Date(2026, 6, 12, 8, 0, 0, 0, berlin); !a.GetDueAt().AsTime().Equal(want) || a.GetDeferred() != "blackout" || a.GetBlackout() != "holiday" ||
		a.GetPolicyVersion() == old || !a.GetRequestedAt().AsTime().Equal(day.Add(8*time.Hour+time.Second)) {
		t.Fatalf("a after the change: %v", a)
	}
	if ev := h.deferredEvents(); len(ev) != 1 || ev[0].GetUserId() != "u1" || ev[0].GetBlackout() != "holiday" {
		t.Fatalf("events %v", ev)
	}
	if parked := h.s.Punctuator().Index(0).Parked(); len(parked) != 0 {
		t.Fatalf("still parked: %v", parked)
	}
	h.tickTime(day.Add(8*time.Hour + 2*time.Second + time.Millisecond))
	h.expectCalls("late")
	h.tickTime(time.Date(2026, 6, 12, 8, 0, 0, 0, berlin))
	h.expectCalls("a")
}

// A command for the user between the tick that parked a follow-up and the
// wake must not record it as fired (the mark is before it), and calls no
// one; its write releases the parked follow-up, which the next tick finds
// again. The tester runs a tick's wake at once, so the tick's parking is
// done here by hand, as onTick does it.
func TestCommandBetweenTickAndWakeKeepsTheParkedFollowUp(t *testing.T) {
	day := time.Date(2026, 6, 11, 0, 0, 0, 0, time.UTC)
	h, p := newPolicyHarness(t, `{}`, day.Add(-12*time.Hour))
	h.onboardUser("u1", "+4915112345678", "", at("a", day.Add(8*time.Hour)))
	p.Store(mustPolicy(t, `{default: {blackouts: [{name: holiday, from: 2026-06-11, to: 2026-06-11}]}}`))

	h.clk.Set(day.Add(8 * time.Hour))
	idx := h.s.Punctuator().Index(0)
	if err := idx.Fill(h.clk.Now()); err != nil { // as onTick does first
		t.Fatal(err)
	}
	due := idx.TakeDue(h.clk.Now(), 0)
	if len(due) != 1 {
		t.Fatalf("due %v", due)
	}
	idx.Park(due[0])
	if next, ok := idx.Next(); ok {
		t.Fatalf("a parked index offers %v", next)
	}

	h.onboardUser("u1", "+4915112345678", "", delay("b", time.Hour)) // between the tick and the wake
	h.expectCalls()
	st := h.state("u1")
	if len(st.GetFired()) != 0 || len(st.GetPending()) != 2 || st.GetPending()[0].GetTaskId() != "a" {
		t.Fatalf("the command recorded the parked follow-up: %v", st)
	}
	if len(idx.Parked()) != 0 || len(idx.Pending()) != 2 {
		t.Fatalf("parked %v, pending %v", idx.Parked(), idx.Pending())
	}
	h.tickTime(day.Add(8*time.Hour + time.Millisecond))
	h.expectCalls()
	if a := h.task("u1", "a"); !a.GetDueAt().AsTime().Equal(time.Date(2026, 6, 12, 8, 0, 0, 0, zone(t, "Europe/Berlin"))) {
		t.Fatalf("a due %v", a.GetDueAt().AsTime())
	}
}

// A follow-up whose due time the new policy still allows fires at it,
// although it was computed under another version.
func TestPolicyChangeThatStillAllowsFires(t *testing.T) {
	day := time.Date(2026, 6, 11, 0, 0, 0, 0, time.UTC)
	h, p := newPolicyHarness(t, `{}`, day.Add(-12*time.Hour))
	h.onboardUser("u1", "+4915112345678", "", at("a", day.Add(8*time.Hour)))
	p.Store(mustPolicy(t, `{default: {blackouts: [{name: later, from: 2026-12-24, to: 2026-12-26}]}}`))
	h.tickTime(day.Add(8 * time.Hour))
	h.expectCalls("a")
	if h.s.Stats.Parked.Load() != 0 {
		t.Fatal("parked a follow-up the new policy allows")
	}
}

// The recurring case: a weekly call at Monday 10:00 local fires at
// 10:00 local on both sides of a DST change (New York with cron, Berlin
// with every 7d), each occurrence with its own call id; a cancel stops the
// rest.
func TestWeeklyRecurrenceAcrossDST(t *testing.T) {
	cases := []struct {
		zone, phone string
		first       time.Time
		repeat      *pb.Repeat
	}{
		{"America/New_York", "+12125550123", time.Date(2026, 3, 2, 10, 0, 0, 0, zone(t, "America/New_York")), &pb.Repeat{Cron: "0 10 * * mon"}},
		{"Europe/Berlin", "+4915112345678", time.Date(2026, 3, 23, 10, 0, 0, 0, zone(t, "Europe/Berlin")), &pb.Repeat{Every: "7d"}},
	}
	for _, c := range cases {
		t.Run(c.zone, func(t *testing.T) {
			loc := zone(t, c.zone)
			h, _ := newPolicyHarness(t, `{}`, c.first.Add(-24*time.Hour))
			f := at("weekly", c.first)
			f.Repeat = c.repeat
			h.onboardUser("u1", c.phone, "", f)
			var ids []string
			var utc []string
			for week := 0; week < 3; week++ {
				task := h.task("u1", "weekly")
				due := task.GetDueAt().AsTime()
				if local := due.In(loc); local.Weekday() != time.Monday || local.Hour() != 10 || local.Minute() != 0 || task.GetOccurrence() != uint32(week+1) {
					t.Fatalf("week %d: due %v (occurrence %d), want Monday 10:00 local", week, local, task.GetOccurrence())
				}
				h.tickTime(due.Add(-time.Second))
				h.expectCalls()
				h.tickTime(due)
				call := h.expectCalls("weekly")[0]
				ids = append(ids, call.GetCallId())
				utc = append(utc, due.UTC().Format("15:04"))
			}
			if ids[0] == ids[1] || ids[1] == ids[2] {
				t.Fatalf("call ids %v repeat", ids)
			}
			if utc[0] == utc[2] {
				t.Fatalf("UTC times %v: the series did not cross the DST change", utc)
			}
			h.cancel("u1", "weekly")
			if st := h.state("u1"); len(st.GetPending()) != 0 {
				t.Fatalf("pending after cancel: %v", st.GetPending())
			}
			h.tickTime(c.first.Add(4 * 7 * 24 * time.Hour))
			h.expectCalls()
		})
	}
}

// A series ends at its count, and a Forget stops it too.
func TestRecurrenceCountAndForget(t *testing.T) {
	start := time.Date(2026, 6, 10, 9, 0, 0, 0, time.UTC)
	h, _ := newPolicyHarness(t, `{default: {open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "00:00", to: "24:00"}]}}`, start)
	f := delay("r", time.Hour)
	f.Repeat = &pb.Repeat{Every: "90m", Count: 2}
	h.onboardUser("u1", "+4915112345678", "", f)
	h.tickTime(start.Add(time.Hour))
	h.expectCalls("r")
	h.tickTime(start.Add(150 * time.Minute))
	h.expectCalls("r")
	if st := h.state("u1"); len(st.GetPending()) != 0 || len(st.GetFired()) != 2 {
		t.Fatalf("after the count: %v", st)
	}
	g := delay("s", time.Hour)
	g.Repeat = &pb.Repeat{Cron: "*/5 * * * *"}
	h.onboardUser("u2", "+4915112345678", "", g)
	h.send("u2", &pb.Command{UserId: "u2", Command: &pb.Command_Forget{Forget: &pb.Forget{}}})
	h.tickTime(start.Add(10 * time.Hour))
	h.expectCalls()
}

// A repeating follow-up deferred by the window skips the occurrences that
// fell while it waited, rather than calling them all at the opening.
func TestRecurrenceSkipsWhatFellWhileDeferred(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	day := time.Date(2026, 6, 10, 0, 0, 0, 0, berlin)
	h, _ := newPolicyHarness(t, `{}`, day.Add(20*time.Hour))
	f := at("hourly", day.Add(20*time.Hour+30*time.Minute))
	f.Repeat = &pb.Repeat{Every: "1h"}
	h.onboardUser("u1", "+4915112345678", "", f)
	h.tickTime(day.Add(20*time.Hour + 30*time.Minute))
	h.expectCalls("hourly")
	next := h.task("u1", "hourly") // 21:30: outside; the 08:00 opening
	if !next.GetRequestedAt().AsTime().Equal(day.Add(21*time.Hour+30*time.Minute)) || !next.GetDueAt().AsTime().Equal(day.Add(32*time.Hour)) {
		t.Fatalf("next: requested %v due %v", next.GetRequestedAt().AsTime().In(berlin), next.GetDueAt().AsTime().In(berlin))
	}
	h.tickTime(day.Add(32 * time.Hour))
	h.expectCalls("hourly")
	after := h.task("u1", "hourly")
	if want := day.Add(32*time.Hour + 30*time.Minute); !after.GetRequestedAt().AsTime().Equal(want) || !after.GetDueAt().AsTime().Equal(want) {
		t.Fatalf("after the opening: requested %v, want %v (the night's occurrences skipped)", after.GetRequestedAt().AsTime().In(berlin), want.In(berlin))
	}
}

// advancedEvents drains the events and returns the KIND_ADVANCED ones.
func (h *harness) advancedEvents() []*pb.ScheduleEvent {
	var out []*pb.ScheduleEvent
	for _, e := range h.nextEvents() {
		if e.GetKind() == pb.ScheduleEvent_KIND_ADVANCED {
			out = append(out, e)
		}
	}
	return out
}

// A policy that allows more moves deferred follow-ups earlier: a window
// that opens earlier brings a follow-up deferred to 08:00 forward to the
// new opening, and a removed blackout brings one back to its requested
// time; each reported once (KIND_ADVANCED). The ticks look at the deferred
// follow-ups only (not the rest of the table) and once per policy version:
// the mark records the version swept.
func TestLooserPolicyMovesDeferredFollowUpsEarlier(t *testing.T) {
	la := zone(t, "America/Los_Angeles")
	berlin := zone(t, "Europe/Berlin")
	start := time.Date(2026, 7, 14, 23, 0, 0, 0, la)
	h, p := newPolicyHarness(t, `
default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "08:00", to: "21:00"}]
  blackouts: [{name: shutdown, from: 2026-07-15, to: 2026-07-15, regions: [DE]}]
`, start)
	h.onboardUser("la", "+14155550100", "", delay("welcome", time.Hour)) // 00:00 local: deferred to 08:00
	berlinDue := time.Date(2026, 7, 15, 11, 0, 0, 0, berlin)
	h.onboardUser("de", "+4915112345678", "", at("call", berlinDue)) // on the shutdown day: deferred to the 16th
	h.onboardUser("ok", "+14155550101", "", at("noon", time.Date(2026, 7, 15, 12, 0, 0, 0, la)))
	if d := h.task("la", "welcome"); d.GetDeferred() != "window" || !d.GetDueAt().AsTime().Equal(time.Date(2026, 7, 15, 8, 0, 0, 0, la)) {
		t.Fatalf("welcome %v", d)
	}
	if d := h.task("de", "call"); d.GetDeferred() != "blackout" {
		t.Fatalf("call %v", d)
	}
	if got := h.s.Punctuator().Index(0).Deferred(); len(got) != 2 {
		t.Fatalf("deferred in the index %v, want the two deferred follow-ups", got)
	}
	h.tickTime(start.Add(time.Minute))
	h.nextEvents()
	swept := h.state(tickKey).GetFiredThrough().GetSweptPolicy()
	if swept != p.Load().Version() {
		t.Fatalf("mark swept %q, want the policy in force %q", swept, p.Load().Version())
	}

	p.Store(mustPolicy(t, `
default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "06:00", to: "22:00"}]
`))
	h.tickTime(start.Add(2 * time.Minute))
	welcome := h.task("la", "welcome")
	if want := time.Date(2026, 7, 15, 6, 0, 0, 0, la); !welcome.GetDueAt().AsTime().Equal(want) || welcome.GetDeferred() != "window" || welcome.GetPolicyVersion() != p.Load().Version() {
		t.Fatalf("welcome after the window widened: due %v deferred %q, want %v", welcome.GetDueAt().AsTime().In(la), welcome.GetDeferred(), want)
	}
	call := h.task("de", "call")
	if !call.GetDueAt().AsTime().Equal(berlinDue) || call.GetDeferred() != "" || call.GetBlackout() != "" {
		t.Fatalf("call after the blackout went: due %v deferred %q", call.GetDueAt().AsTime().In(berlin), call.GetDeferred())
	}
	ev := h.advancedEvents()
	if len(ev) != 2 {
		t.Fatalf("advanced events %v, want one per moved follow-up", ev)
	}
	if h.s.Stats.Advanced.Load() != 2 || h.state(tickKey).GetFiredThrough().GetSweptPolicy() != p.Load().Version() {
		t.Fatalf("advanced %d, swept %q", h.s.Stats.Advanced.Load(), h.state(tickKey).GetFiredThrough().GetSweptPolicy())
	}
	// Swept once: the next tick under the same policy moves nothing again.
	h.tickTime(start.Add(3 * time.Minute))
	if ev := h.advancedEvents(); len(ev) != 0 {
		t.Fatalf("a second sweep: %v", ev)
	}
	h.tickTime(berlinDue) // 02:00 in Los Angeles
	h.expectCalls("call")
	h.tickTime(time.Date(2026, 7, 15, 6, 0, 0, 0, la).Add(-time.Second))
	h.expectCalls()
	h.tickTime(time.Date(2026, 7, 15, 6, 0, 0, 0, la))
	h.expectCalls("welcome")
	h.tickTime(time.Date(2026, 7, 15, 12, 0, 0, 0, la))
	h.expectCalls("noon")
}

// A sweep goes a batch per tick and resumes where it stopped; follow-ups
// the policy moved later are left to the tick that finds them due.
func TestSweepOfDeferredFollowUpsGoesInBatches(t *testing.T) {
	la := zone(t, "America/Los_Angeles")
	start := time.Date(2026, 7, 14, 23, 0, 0, 0, la)
	h, p := newPolicyHarness(t, spreadPolicy, start)
	const users = sweepBatch + 500
	for i := range users {
		h.onboardUser(fmt.Sprintf("u%04d", i), "+14155550100", "", delay("welcome", time.Hour))
	}
	if got := len(h.s.Punctuator().Index(0).Deferred()); got != users {
		t.Fatalf("%d deferred in the index, want %d", got, users)
	}
	h.tickTime(start.Add(time.Minute))
	h.nextEvents()
	p.Store(mustPolicy(t, `
default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "07:00", to: "21:00"}]
  spread: 10m
`))
	h.tickTime(start.Add(2 * time.Minute))
	if n := h.s.Stats.Advanced.Load(); n != sweepBatch {
		t.Fatalf("first tick advanced %d, want a batch of %d", n, sweepBatch)
	}
	if !h.s.Punctuator().Index(0).Sweeping() || h.state(tickKey).GetFiredThrough().GetSweptPolicy() == p.Load().Version() {
		t.Fatal("the sweep ended after one batch")
	}
	h.tickTime(start.Add(3 * time.Minute))
	if n := h.s.Stats.Advanced.Load(); n != users {
		t.Fatalf("advanced %d after two ticks, want %d", n, users)
	}
	if h.s.Punctuator().Index(0).Sweeping() || h.state(tickKey).GetFiredThrough().GetSweptPolicy() != p.Load().Version() {
		t.Fatal("the sweep did not end")
	}
	opening := time.Date(2026, 7, 15, 7, 0, 0, 0, la)
	for i := range users {
		d := h.task(fmt.Sprintf("u%04d", i), "welcome").GetDueAt().AsTime()
		if d.Before(opening) || !d.Before(opening.Add(10*time.Minute)) {
			t.Fatalf("u%04d due %v, want within 10m of 07:00", i, d.In(la))
		}
	}
}

// A cap of more calls than the value's usual history (FiredHistory, 16)
// counts every call: the value keeps the calls the cap counts.
func TestCapCountsMoreCallsThanTheUsualHistory(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	day := time.Date(2026, 6, 10, 0, 0, 0, 0, berlin)
	h, _ := newPolicyHarness(t, `{default: {cap: {calls: 20, per: 7d}}}`, day.Add(8*time.Hour))
	var fs []*pb.FollowUp
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("t%02d", i)
		fs = append(fs, at(id, day.Add(9*time.Hour+time.Duration(i)*30*time.Minute)))
		ids = append(ids, id)
	}
	h.onboardUser("u1", "+4915112345678", "", fs...)
	for i := range 20 {
		h.tickTime(day.Add(9*time.Hour + time.Duration(i)*30*time.Minute))
	}
	if got := h.expectCalls(ids...); len(got) != 20 {
		t.Fatalf("%d calls", len(got))
	}
	h.onboardUser("u1", "+4915112345678", "", at("t20", day.Add(19*time.Hour)))
	if n := len(h.state("u1").GetFired()); n != 20 {
		t.Fatalf("the value remembers %d fired calls, want the 20 the cap counts", n)
	}
	if got, want := h.task("u1", "t20"), day.Add(7*24*time.Hour+9*time.Hour); got.GetDeferred() != "cap" || !got.GetDueAt().AsTime().Equal(want) {
		t.Fatalf("the 21st call due %v (%q), want %v (cap)", got.GetDueAt().AsTime().In(berlin), got.GetDeferred(), want)
	}
}
