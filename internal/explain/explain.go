// Package explain builds a user's decision trail: for each follow-up of
// the user, in order, what happened to it and why, from what the
// deployment records. The request (the Onboard on `onboarding`), each
// move of its effective time by the calling policy with the rule that made
// it (`followup-events`, KIND_DEFERRED's steps), the fire (`ivr-calls`,
// with its lateness), the placement and every status (`ivr-results`),
// retries and the final outcome, suppression, erasure, and rejections
// (`scheduler-dlq`, `dialer-dlq`); then what the scheduler's and the
// dialer's tables hold now. `ivrsched explain`, the admin API's
// /api/explain and the web page's user view show it.
//
// Reading is bounded: only the user's partition of each topic (they are
// co-partitioned by user id with murmur2), from the first offset at or
// after a start time (Kafka's offsets by time) to the end as it was when
// the read began (Read). The trail names what it read.
package explain

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/phone"
	"github.com/ivrsched/ivrsched/internal/redact"
)

// Pos is where a fact was read: a topic's partition and offset, with the
// record's timestamp; or a table (Offset -1).
type Pos struct {
	Topic     string
	Partition int32
	Offset    int64
	Time      time.Time
}

func (p Pos) String() string {
	if p.Offset < 0 {
		return p.Topic
	}
	return fmt.Sprintf("%s/%d@%d", p.Topic, p.Partition, p.Offset)
}

// Fact is one decoded record of the user.
type Fact[T any] struct {
	Pos
	Msg T
}

// Facts are what the deployment recorded about one user: the user's
// records on each topic read, and the tables' values now (nil: none, or
// not asked).
type Facts struct {
	User      string
	Partition int32
	// Since is where reading began; Read is when.
	Since, Read time.Time
	Commands    []Fact[*pb.Command]
	Events      []Fact[*pb.ScheduleEvent]
	Calls       []Fact[*pb.IVRCall]
	Results     []Fact[*pb.CallResult]
	DeadLetters []Fact[*pb.DeadLetter]
	// Undecodable are the user's records that did not decode.
	Undecodable []Pos
	Scheduler   *pb.UserState
	Dialer      *pb.DialerState
	Sources     []Source
	// Notes say what could not be read (a topic, the tables).
	Notes []string
}

// Source is what was read of one topic: the user's partition, offsets
// [From, To), how many records that is and how many were the user's.
type Source struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	From      int64  `json:"from_offset"`
	To        int64  `json:"to_offset"`
	Records   int64  `json:"records"`
	User      int    `json:"user_records"`
	Error     string `json:"error,omitempty"`
}

// Trail is a user's decision trail.
type Trail struct {
	User      string `json:"user_id"`
	Partition int32  `json:"partition"`
	// Zone is the zone of the local times; ZoneFrom says where it comes
	// from ("the user's time zone", "the number's zone", ...).
	Zone     string    `json:"time_zone"`
	ZoneFrom string    `json:"time_zone_source"`
	Since    time.Time `json:"since"`
	Read     time.Time `json:"read_at"`
	Sources  []Source  `json:"sources"`
	// UserSteps concern the user rather than one follow-up: erasure,
	// expiry, a rejected command, an update of the phone or zone.
	UserSteps []Step     `json:"user_steps"`
	FollowUps []FollowUp `json:"follow_ups"`
	Notes     []string   `json:"notes"`
}

// FollowUp is the trail of one task id of the user: its attempts, retries
// and, for a series, its occurrences.
type FollowUp struct {
	Task string `json:"task_id"`
	// Outcome sums it up: the final outcome, "pending", or what is known.
	Outcome string `json:"outcome"`
	Steps   []Step `json:"steps"`
}

// Step is one fact of a trail.
type Step struct {
	At      time.Time `json:"at"`
	AtLocal string    `json:"at_local"`
	// What: requested, moved, advanced, rescheduled, run-now, fired,
	// placed, status, final, retry, answered, exhausted, too-old,
	// cancelled, too-late, unknown-task, suppressed, rejected, forgotten,
	// expired, updated, pending.
	What string `json:"what"`
	// Rule moved the effective time (What moved): window, blackout,
	// spread, cap, paused, policy (a new policy version placed it again).
	Rule string `json:"rule,omitempty"`
	// From and To: an effective time's move, or, for requested, To is the
	// time asked for; for pending and fired, To is the effective time.
	From      *time.Time `json:"from,omitempty"`
	FromLocal string     `json:"from_local,omitempty"`
	To        *time.Time `json:"to,omitempty"`
	ToLocal   string     `json:"to_local,omitempty"`
	Attempt   uint32     `json:"attempt,omitempty"`
	CallID    string     `json:"call_id,omitempty"`
	// ProviderCallID is the provider's id of the call (placed).
	ProviderCallID string `json:"provider_call_id,omitempty"`
	Outcome        string `json:"outcome,omitempty"`
	// Lateness of a fire after its effective time.
	Lateness *Duration `json:"lateness,omitempty"`
	Detail   string    `json:"detail,omitempty"`
	Source   string    `json:"source"`

	order int // the order facts of the same instant keep
}

// Duration is a time.Duration that is JSON as its string ("12.5ms").
type Duration time.Duration

// MarshalText renders d as time.Duration does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// UTCLayout is how a trail writes an instant: RFC 3339 in UTC, to the
// millisecond.
const UTCLayout = "2006-01-02T15:04:05.999Z07:00"

// MaxSteps bounds a trail: beyond it the oldest follow-ups are left out
// (a note says how many).
const MaxSteps = 10000

// The sources of the trail's facts (sortSteps keeps each one's order).
const (
	orderCommand = iota
	orderEvent
	orderCall
	orderResult
	orderDeadLetter
	orderTable
)

// Build builds the trail of f's user, with local times in the user's zone.
func Build(f Facts) Trail {
	loc, zoneFrom := userZone(f)
	b := builder{f: f, loc: loc, tasks: map[string]*FollowUp{}, taskOfCall: map[string]string{}, version: map[string]string{}}
	tr := Trail{User: f.User, Partition: f.Partition, Zone: loc.String(), ZoneFrom: zoneFrom, Since: f.Since.UTC(), Read: f.Read.UTC(),
		Sources: f.Sources, Notes: append([]string(nil), f.Notes...), UserSteps: []Step{}, FollowUps: []FollowUp{}}
	for _, c := range f.Calls {
		b.taskOfCall[c.Msg.GetCallId()] = c.Msg.GetTaskId()
	}
	b.commands()
	b.events()
	b.calls()
	b.results()
	b.tables()
	for _, p := range f.Undecodable {
		b.user(Step{At: p.Time, What: "undecodable", Detail: "a record of the user that does not decode", Source: p.String()}, orderTable)
	}
	tr.UserSteps = sortSteps(b.userSteps)
	for _, id := range b.order {
		fu := b.tasks[id]
		fu.Steps = sortSteps(fu.Steps)
		fu.Outcome = b.outcome(fu)
		tr.FollowUps = append(tr.FollowUps, *fu)
	}
	slices.SortStableFunc(tr.FollowUps, func(a, b FollowUp) int { return a.Steps[0].At.Compare(b.Steps[0].At) })
	n := len(tr.UserSteps)
	for _, fu := range tr.FollowUps {
		n += len(fu.Steps)
	}
	dropped := 0
	for n > MaxSteps && len(tr.FollowUps) > 1 {
		n -= len(tr.FollowUps[0].Steps)
		tr.FollowUps = tr.FollowUps[1:]
		dropped++
	}
	if dropped > 0 {
		tr.Notes = append(tr.Notes, fmt.Sprintf("the %d oldest follow-ups are left out: a trail shows at most %d steps (narrow it with --since or --task)", dropped, MaxSteps))
	}
	if !b.sawRequest && len(tr.FollowUps) > 0 {
		tr.Notes = append(tr.Notes, "no Onboard of the user was read: the requests were made before the start of the range (onboarding keeps 7 days), so each follow-up begins with its first later fact")
	}
	return tr
}

// Filter keeps only the follow-ups of task.
func (t Trail) Filter(task string) Trail {
	t.FollowUps = slices.DeleteFunc(slices.Clone(t.FollowUps), func(f FollowUp) bool { return f.Task != task })
	return t
}

type builder struct {
	f          Facts
	loc        *time.Location
	tasks      map[string]*FollowUp
	order      []string
	userSteps  []Step
	taskOfCall map[string]string
	version    map[string]string // task id: the policy version of its last placement
	sawRequest bool
}

// userZone is where local times are read: the user's time zone, else the
// number's first zone, from the scheduler's value or the last Onboard read.
func userZone(f Facts) (*time.Location, string) {
	try := func(name, from string) (*time.Location, string, bool) {
		if name == "" {
			return nil, "", false
		}
		loc, err := phone.LoadZone(name)
		if err != nil {
			return nil, "", false
		}
		return loc, from, true
	}
	if loc, from, ok := try(f.Scheduler.GetTimeZone(), "the user's time zone"); ok {
		return loc, from
	}
	if z := f.Scheduler.GetPhoneZones(); len(z) > 0 {
		from := "the number's zone"
		if len(z) > 1 {
			from = fmt.Sprintf("the first of the number's zones (%s)", strings.Join(z, ", "))
		}
		if loc, from, ok := try(z[0], from); ok {
			return loc, from
		}
	}
	for i := len(f.Commands) - 1; i >= 0; i-- {
		if loc, from, ok := try(f.Commands[i].Msg.GetOnboard().GetTimeZone(), "the time zone of the user's last Onboard"); ok {
			return loc, from
		}
	}
	return time.UTC, "UTC: no time zone of the user is known (no scheduler value, no Onboard with one read)"
}

func (b *builder) local(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.In(b.loc).Format("2006-01-02 15:04:05 MST")
}

func (b *builder) task(id string) *FollowUp {
	if fu, ok := b.tasks[id]; ok {
		return fu
	}
	fu := &FollowUp{Task: id}
	b.tasks[id] = fu
	b.order = append(b.order, id)
	return fu
}

func (b *builder) add(task string, s Step, order int) {
	b.fill(&s, order)
	fu := b.task(task)
	fu.Steps = append(fu.Steps, s)
}

func (b *builder) user(s Step, order int) {
	b.fill(&s, order)
	b.userSteps = append(b.userSteps, s)
}

func (b *builder) fill(s *Step, order int) {
	s.At = s.At.UTC()
	s.AtLocal = b.local(s.At)
	if s.To != nil {
		to := s.To.UTC()
		s.To, s.ToLocal = &to, b.local(to)
	}
	if s.From != nil {
		from := s.From.UTC()
		s.From, s.FromLocal = &from, b.local(from)
	}
	s.order = order
}

func ts(t interface{ AsTime() time.Time }, ok bool) *time.Time {
	if !ok {
		return nil
	}
	v := t.AsTime()
	return &v
}

// at is when something happened: the time it carries, else the record's.
func at(t interface {
	AsTime() time.Time
	IsValid() bool
}, p Pos) time.Time {
	if t != nil && t.IsValid() && !t.AsTime().IsZero() && t.AsTime().Unix() != 0 {
		return t.AsTime()
	}
	return p.Time
}

// OutcomeName is an outcome as reports name it: OUTCOME_NO_ANSWER is
// "no-answer".
func OutcomeName(o pb.Outcome) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(o.String(), "OUTCOME_")), "_", "-")
}

// commands adds the requests: each Onboard's follow-ups, requested when
// the command was issued for the time it asks; a command rejected names
// its dead letter.
func (b *builder) commands() {
	type place struct {
		partition int32
		offset    int64
	}
	rejected := map[place]*pb.DeadLetter{}
	for _, d := range b.f.DeadLetters {
		if d.Msg.GetSourceTopic() == b.topicOf("onboarding") {
			rejected[place{d.Msg.GetSourcePartition(), d.Msg.GetSourceOffset()}] = d.Msg
		}
	}
	matched := map[*pb.DeadLetter]bool{}
	for _, c := range b.f.Commands {
		cmd := c.Msg
		issued := c.Time
		if cmd.GetRequestedAt() != nil {
			issued = cmd.GetRequestedAt().AsTime()
		}
		dl := rejected[place{c.Partition, c.Offset}]
		if dl != nil {
			matched[dl] = true
		}
		kind := commandKind(cmd)
		if o := cmd.GetOnboard(); o != nil {
			b.sawRequest = true
			base := issued
			if o.GetOnboardedAt() != nil {
				base = o.GetOnboardedAt().AsTime()
			}
			if len(o.GetFollowUps()) == 0 {
				detail := "an Onboard without follow-ups: the user's first gets the scheduler's default follow-up, a later one updates the phone or time zone"
				if o.GetTimeZone() != "" {
					detail += "; time zone " + o.GetTimeZone()
				}
				b.user(Step{At: issued, What: "updated", Detail: detail, Source: c.String()}, orderCommand)
			}
			for i, fu := range o.GetFollowUps() {
				id := fu.GetTaskId()
				if id == "" {
					id = fmt.Sprintf("followup-%d", i+1)
				}
				due := base.Add(fu.GetDelay().AsDuration())
				how := fmt.Sprintf("a delay of %v from %s", fu.GetDelay().AsDuration(), baseName(o))
				if fu.GetDueAt() != nil {
					due, how = fu.GetDueAt().AsTime(), "an absolute due time"
				}
				detail := how
				if camp := fu.GetAction().GetCampaignId(); camp != "" {
					detail += ", campaign " + camp
				}
				if r := fu.GetRepeat(); r != nil {
					detail += ", repeating " + r.GetEvery() + r.GetCron()
				}
				b.add(id, Step{At: issued, What: "requested", To: &due, Detail: detail, Source: c.String()}, orderCommand)
				if dl != nil {
					b.add(id, b.rejection(dl, c.Pos), orderDeadLetter)
				}
			}
			if dl != nil && len(o.GetFollowUps()) == 0 {
				b.user(b.rejection(dl, c.Pos), orderDeadLetter)
			}
			continue
		}
		if dl != nil {
			s := b.rejection(dl, c.Pos)
			s.Detail = kind + ": " + s.Detail
			if task := commandTask(cmd); task != "" {
				b.add(task, s, orderDeadLetter)
			} else {
				b.user(s, orderDeadLetter)
			}
		}
	}
	for _, d := range b.f.DeadLetters {
		if matched[d.Msg] {
			continue
		}
		s := b.rejection(d.Msg, d.Pos) // a command before the range read, a call, a tick
		if d.Msg.GetSourceTopic() == b.topicOf("onboarding") {
			cmd := new(pb.Command)
			if err := unmarshal(d.Msg.GetValue(), cmd); err == nil {
				s.Detail = commandKind(cmd) + ": " + s.Detail
				if task := commandTask(cmd); task != "" {
					b.add(task, s, orderDeadLetter)
					continue
				}
			}
		}
		if d.Msg.GetSourceTopic() == b.topicOf("ivr-calls") {
			// The call's record is the value: find its task.
			call := new(pb.IVRCall)
			if err := unmarshal(d.Msg.GetValue(), call); err == nil && call.GetTaskId() != "" {
				s.CallID, s.Attempt = call.GetCallId(), call.GetAttempt()
				b.add(call.GetTaskId(), s, orderDeadLetter)
				continue
			}
		}
		b.user(s, orderDeadLetter)
	}
}

func baseName(o *pb.Onboard) string {
	if o.GetOnboardedAt() != nil {
		return "onboarded_at"
	}
	return "the command's issue time"
}

// topicOf is the name read for a topic's base name (with the prefix).
func (b *builder) topicOf(base string) string {
	for _, s := range b.f.Sources {
		if strings.HasSuffix(s.Topic, base) {
			return s.Topic
		}
	}
	return base
}

func (b *builder) rejection(d *pb.DeadLetter, p Pos) Step {
	detail := d.GetReason()
	if d.GetDetail() != "" {
		detail += ": " + redact.Text(d.GetDetail())
	}
	src := fmt.Sprintf("%s/%d@%d, dead letter in %s", d.GetSourceTopic(), d.GetSourcePartition(), d.GetSourceOffset(), p.String())
	return Step{At: at(d.GetAt(), p), What: "rejected", Outcome: d.GetReason(), Detail: detail, Source: src}
}

func commandKind(c *pb.Command) string {
	switch c.GetCommand().(type) {
	case *pb.Command_Onboard:
		return "Onboard"
	case *pb.Command_Cancel:
		return "Cancel"
	case *pb.Command_Reschedule:
		return "Reschedule"
	case *pb.Command_Forget:
		return "Forget"
	case *pb.Command_CallEnded:
		return "CallEnded"
	case *pb.Command_RunNow:
		return "RunNow"
	}
	return "a command"
}

func commandTask(c *pb.Command) string {
	return cmp.Or(c.GetCancel().GetTaskId(), c.GetReschedule().GetTaskId(), c.GetRunNow().GetTaskId(), c.GetCallEnded().GetTaskId())
}

// events adds what the scheduler reported.
func (b *builder) events() {
	for _, e := range b.f.Events {
		ev := e.Msg
		when := at(ev.GetAt(), e.Pos)
		// Free text of a record is masked: a number in it shows as its last
		// digits only (ids and times are ours, and shown as they are).
		s := Step{At: when, CallID: ev.GetCallId(), Detail: redact.Text(ev.GetDetail()), Source: e.String()}
		due := ts(ev.GetDueAt(), ev.GetDueAt() != nil)
		switch ev.GetKind() {
		case pb.ScheduleEvent_KIND_DEFERRED, pb.ScheduleEvent_KIND_ADVANCED:
			b.moves(ev, e.Pos, when)
			continue
		case pb.ScheduleEvent_KIND_RESCHEDULED:
			s.What, s.To = "rescheduled", due
			s.Detail = "requested again for the new time"
		case pb.ScheduleEvent_KIND_RUN_NOW:
			s.What, s.To = "run-now", due
			s.Detail = "an operator's run-now: it fires now, whatever the calling policy says"
		case pb.ScheduleEvent_KIND_CANCELLED:
			s.What, s.To = "cancelled", due
		case pb.ScheduleEvent_KIND_TOO_LATE:
			s.What = "too-late"
		case pb.ScheduleEvent_KIND_UNKNOWN_TASK:
			s.What = "unknown-task"
		case pb.ScheduleEvent_KIND_RETRY:
			s.What, s.To, s.Outcome = "retry", ts(ev.GetRequestedAt(), ev.GetRequestedAt() != nil), ev.GetReason()
			s.Detail = strings.TrimPrefix(redact.Text(ev.GetDetail())+"; effective "+ev.GetDueAt().AsTime().UTC().Format(UTCLayout), "; ")
		case pb.ScheduleEvent_KIND_ANSWERED:
			s.What, s.Outcome = "answered", ev.GetReason()
		case pb.ScheduleEvent_KIND_EXHAUSTED:
			s.What, s.Outcome = "exhausted", ev.GetReason()
		case pb.ScheduleEvent_KIND_TOO_OLD:
			s.What, s.Outcome = "too-old", ev.GetReason()
		case pb.ScheduleEvent_KIND_SUPPRESSED:
			s.What = "suppressed"
			s.Detail = "the number is on the do-not-call list"
			if ev.GetReason() != "" {
				s.Detail += ": " + redact.Text(ev.GetReason())
			}
			if ev.GetSuppressedAt() != nil {
				s.Detail += ", listed " + ev.GetSuppressedAt().AsTime().UTC().Format(time.RFC3339)
			}
			if ev.GetSuppressedUntil() != nil {
				s.Detail += ", until " + ev.GetSuppressedUntil().AsTime().UTC().Format(time.RFC3339)
			}
		case pb.ScheduleEvent_KIND_FORGOTTEN:
			s.What = "forgotten"
			s.Detail = "erased by a Forget: every pending follow-up dropped, the user's values deleted"
		case pb.ScheduleEvent_KIND_EXPIRED:
			s.What = "expired"
		default:
			s.What = strings.ToLower(strings.TrimPrefix(ev.GetKind().String(), "KIND_"))
		}
		if ev.GetTaskId() == "" {
			b.user(s, orderEvent)
		} else {
			b.add(ev.GetTaskId(), s, orderEvent)
		}
	}
}

// moves adds a deferral (or advance) as one step per rule that moved the
// follow-up, after a policy step when a new policy version placed it.
func (b *builder) moves(ev *pb.ScheduleEvent, p Pos, when time.Time) {
	task := ev.GetTaskId()
	v := ev.GetPolicyVersion()
	if prev, ok := b.version[task]; ok && v != "" && prev != v {
		b.add(task, Step{At: when, What: "moved", Rule: "policy", Detail: fmt.Sprintf("the calling policy changed (version %s, was %s) and places it again", v, prev), Source: p.String()}, orderEvent)
	}
	if v != "" {
		b.version[task] = v
	}
	what := "moved"
	if ev.GetKind() == pb.ScheduleEvent_KIND_ADVANCED {
		what = "advanced"
		b.add(task, Step{At: when, What: what, To: ts(ev.GetDueAt(), ev.GetDueAt() != nil),
			Detail: "the calling policy in force allows it earlier", Source: p.String()}, orderEvent)
		if len(ev.GetSteps()) == 0 {
			return
		}
		what = "moved"
	}
	if len(ev.GetSteps()) == 0 { // reported before the steps were
		d := "the rules' order is not recorded (reported by an older scheduler)"
		if ev.GetBlackout() != "" {
			d = "blackout " + ev.GetBlackout() + "; " + d
		}
		b.add(task, Step{At: when, What: what, Rule: ev.GetReason(), From: ts(ev.GetRequestedAt(), ev.GetRequestedAt() != nil),
			To: ts(ev.GetDueAt(), ev.GetDueAt() != nil), Detail: d, Source: p.String()}, orderEvent)
		return
	}
	for _, st := range ev.GetSteps() {
		s := Step{At: when, What: what, Rule: st.GetRule(), From: ts(st.GetFrom(), st.GetFrom() != nil), To: ts(st.GetTo(), st.GetTo() != nil), Source: p.String()}
		if st.GetBlackout() != "" {
			s.Detail = "blackout " + st.GetBlackout()
		}
		if v != "" {
			s.Detail = strings.TrimPrefix(s.Detail+"; policy "+v, "; ")
		}
		b.add(task, s, orderEvent)
	}
}

// calls adds the fires: each call with its effective time and lateness.
func (b *builder) calls() {
	seen := map[string]bool{}
	for _, c := range b.f.Calls {
		call := c.Msg
		fired := at(call.GetFiredAt(), c.Pos)
		s := Step{At: fired, What: "fired", CallID: call.GetCallId(), Attempt: call.GetAttempt(), Source: c.String()}
		if seen[call.GetCallId()] {
			s.Detail = "published again under the same call id (a replay after a crash): the dialer places it once"
		}
		seen[call.GetCallId()] = true
		if call.GetDueAt() != nil {
			s.To = ts(call.GetDueAt(), true)
			late := Duration(fired.Sub(call.GetDueAt().AsTime()))
			s.Lateness = &late
		}
		b.add(call.GetTaskId(), s, orderCall)
	}
}

// results adds the dialer's results: the placement, each status, the
// final outcome.
func (b *builder) results() {
	seen := map[string]bool{}
	for _, r := range b.f.Results {
		res := r.Msg
		task := cmp.Or(res.GetTaskId(), b.taskOfCall[res.GetCallId()])
		s := Step{At: at(res.GetAt(), r.Pos), CallID: res.GetCallId(), Attempt: res.GetAttempt(), ProviderCallID: res.GetProviderCallId(),
			Outcome: OutcomeName(res.GetOutcome()), Detail: redact.Text(res.GetDetail()), Source: r.String()}
		if k := fmt.Sprint(res.GetCallId(), res.GetOutcome(), res.GetFinal(), res.GetAt().AsTime().UnixNano()); seen[k] {
			s.Detail = strings.TrimPrefix(s.Detail+"; published again (a replay after a crash)", "; ")
		} else {
			seen[k] = true
		}
		switch {
		case res.GetFinal():
			s.What = "final"
		case res.GetOutcome() == pb.Outcome_OUTCOME_PLACED:
			s.What = "placed"
		default:
			s.What = "status"
		}
		if task == "" {
			b.user(s, orderResult)
		} else {
			b.add(task, s, orderResult)
		}
	}
}

// tables adds what the tables hold now and the topics read did not show:
// the pending follow-ups, fires and calls older than the range read.
func (b *builder) tables() {
	seenCall := map[string]bool{}
	for _, c := range b.f.Calls {
		seenCall[c.Msg.GetCallId()] = true
	}
	seenResult := map[string]bool{}
	for _, r := range b.f.Results {
		seenResult[r.Msg.GetCallId()] = true
	}
	if st := b.f.Scheduler; st != nil {
		for _, f := range st.GetFired() {
			if seenCall[f.GetCallId()] {
				continue
			}
			t := f.GetTask()
			s := Step{What: "fired", CallID: f.GetCallId(), Attempt: t.GetAttempt(), To: ts(t.GetDueAt(), t.GetDueAt() != nil),
				Source: "scheduler table (fired history, now)", Detail: "fired before the range read"}
			s.At = t.GetDueAt().AsTime()
			if f.GetFiredAt() != nil {
				s.At = f.GetFiredAt().AsTime()
			}
			if t.GetOutcome() != pb.Outcome_OUTCOME_UNSPECIFIED {
				s.Outcome = OutcomeName(t.GetOutcome())
			}
			b.add(t.GetTaskId(), s, orderTable)
		}
		for _, t := range st.GetPending() {
			due := t.GetDueAt().AsTime()
			detail := fmt.Sprintf("requested %s", requested(t).UTC().Format(time.RFC3339))
			if t.GetDeferred() != "" {
				detail += ", deferred by " + t.GetDeferred()
				if t.GetBlackout() != "" {
					detail += " (" + t.GetBlackout() + ")"
				}
			}
			if t.GetPolicyVersion() != "" {
				detail += ", policy " + t.GetPolicyVersion()
			}
			if t.GetHeld() {
				detail += ", held (fires through a wake)"
			}
			// Listed at its effective time: what comes next.
			b.add(t.GetTaskId(), Step{At: due, What: "pending", To: &due, Attempt: t.GetAttempt(), Detail: detail,
				Source: "scheduler table (now)"}, orderTable)
		}
	}
	if d := b.f.Dialer; d != nil {
		for _, r := range d.GetCalls() {
			if seenResult[r.GetCallId()] {
				continue
			}
			what := "status"
			if r.GetFinal() {
				what = "final"
			}
			b.add(cmp.Or(r.GetTaskId(), b.taskOfCall[r.GetCallId()]), Step{At: r.GetAt().AsTime(), What: what, CallID: r.GetCallId(), Attempt: r.GetAttempt(),
				ProviderCallID: r.GetProviderCallId(), Outcome: OutcomeName(r.GetOutcome()), Detail: "the dialer's latest status of the call, not in the range read",
				Source: "dialer table (now)"}, orderTable)
		}
	}
}

func requested(t *pb.Task) time.Time {
	if t.GetRequestedAt() != nil {
		return t.GetRequestedAt().AsTime()
	}
	return t.GetDueAt().AsTime()
}

// sortSteps merges the steps of each source (command, event, call,
// result, dead letter, table), each kept in the order read (a partition's
// order), by time; at one instant, by what comes first in a call's life
// (rank), then by source.
func sortSteps(s []Step) []Step {
	lists := map[int][]Step{}
	for _, x := range s {
		lists[x.order] = append(lists[x.order], x)
	}
	out := make([]Step, 0, len(s))
	for len(out) < len(s) {
		best := -1
		for src, l := range lists {
			if len(l) > 0 && (best < 0 || before(l[0], lists[best][0])) {
				best = src
			}
		}
		out = append(out, lists[best][0])
		lists[best] = lists[best][1:]
	}
	return out
}

func before(a, b Step) bool {
	if !a.At.Equal(b.At) {
		return a.At.Before(b.At)
	}
	if ra, rb := rank[a.What], rank[b.What]; ra != rb {
		return ra < rb
	}
	return a.order < b.order
}

// rank orders the steps of one instant from different sources.
var rank = map[string]int{
	"requested": 0, "updated": 0, "rescheduled": 1, "run-now": 1, "advanced": 2, "moved": 2,
	"fired": 3, "suppressed": 3, "placed": 4, "status": 5, "final": 6, "retry": 7,
	"answered": 8, "exhausted": 8, "too-old": 8, "cancelled": 8, "too-late": 8, "unknown-task": 8, "rejected": 8,
	"forgotten": 9, "expired": 9, "pending": 10, "undecodable": 10,
}

// outcome sums a follow-up up by its last telling step; an erasure of the
// user after it ends it.
func (b *builder) outcome(fu *FollowUp) string {
	last := fu.Steps[len(fu.Steps)-1].At
	for _, s := range b.userSteps {
		if (s.What == "forgotten" || s.What == "expired") && !s.At.Before(last) {
			return s.What + " at " + s.At.Format(time.RFC3339)
		}
	}
	for i := len(fu.Steps) - 1; i >= 0; i-- {
		s := fu.Steps[i]
		switch s.What {
		case "answered":
			if s.Outcome == "answered" {
				return "answered"
			}
			return "done: " + s.Outcome
		case "exhausted", "too-old":
			return s.What + " (" + s.Outcome + ")"
		case "cancelled", "suppressed", "rejected", "too-late":
			return s.What
		case "pending":
			return "pending: fires at " + s.At.Format(time.RFC3339) + " (" + s.AtLocal + ")"
		case "final":
			return "called: " + s.Outcome
		case "retry":
			return "retry pending (after " + s.Outcome + ")"
		case "fired", "placed", "status":
			return "called: no final outcome recorded yet"
		}
	}
	return "no outcome recorded in the range read"
}
