package policy

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/phone"
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := phone.LoadZone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// at is a local wall time in a zone ("2006-01-02 15:04", unambiguous).
func at(t testing.TB, loc *time.Location, s string) time.Time {
	t.Helper()
	v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func issuePolicy(t testing.TB) *Policy {
	t.Helper()
	doc, err := os.ReadFile("../../testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return mustParse(t, string(doc))
}

func effective(t testing.TB, p *Policy, r Request) Result {
	t.Helper()
	res, err := p.Effective(r)
	if err != nil {
		t.Fatalf("Effective(%+v): %v", r, err)
	}
	if res.At.Before(r.Due) {
		t.Fatalf("Effective(%+v) = %v, before the due time", r, res.At)
	}
	return res
}

// A user in Los Angeles onboarded at 23:00 local with a 1 h delay is called
// at 08:00 local, plus the spread of its call id (the issue's policy
// spreads over 10 minutes); without a spread at 08:00 sharp.
func TestLosAngelesNightDefersToMorning(t *testing.T) {
	la := zone(t, "America/Los_Angeles")
	onboarded := at(t, la, "2027-03-10 23:00")
	req := Request{Due: onboarded.Add(time.Hour), Zones: []*time.Location{la}, Region: "US", CallID: "call-u42-welcome"}

	res := effective(t, Default(), req)
	if want := at(t, la, "2027-03-11 08:00"); !res.At.Equal(want) || res.Reason != ReasonWindow {
		t.Errorf("default policy: %v %v, want %v window", res.At.In(la), res.Reason, want)
	}

	p := issuePolicy(t)
	res = effective(t, p, req)
	open := at(t, la, "2027-03-11 08:00")
	if res.At.Before(open) || !res.At.Before(open.Add(10*time.Minute)) || res.Reason != ReasonWindow {
		t.Errorf("issue policy: %v %v, want in [08:00, 08:10) window", res.At.In(la), res.Reason)
	}
	if want := open.Add(spreadOffset("call-u42-welcome", 10*time.Minute)); !res.At.Equal(want) {
		t.Errorf("spread: %v, want %v", res.At.In(la), want.In(la))
	}
	if again := effective(t, p, req); !again.At.Equal(res.At) {
		t.Errorf("not deterministic: %v then %v", res.At, again.At)
	}
}

func TestEffectiveCases(t *testing.T) {
	p := issuePolicy(t)
	ny := zone(t, "America/New_York")
	paris := zone(t, "Europe/Paris")
	berlin := zone(t, "Europe/Berlin")
	cases := []struct {
		name     string
		campaign string
		loc      *time.Location
		region   string
		due      string
		want     string // local, or "spread:<local opening>" for [opening, opening+10m)
		reason   Reason
		blackout string
	}{
		{"inside the window", "", ny, "US", "2027-03-10 12:34", "2027-03-10 12:34", ReasonNone, ""},
		{"at the opening", "", ny, "US", "2027-03-10 08:00", "2027-03-10 08:00", ReasonNone, ""},
		{"at the close", "", ny, "US", "2027-03-10 21:00", "spread:2027-03-11 08:00", ReasonWindow, ""},
		{"early morning", "", ny, "US", "2027-03-10 03:00", "spread:2027-03-10 08:00", ReasonWindow, ""},
		{"blackout date", "", ny, "US", "2027-01-01 10:00", "spread:2027-01-02 08:00", ReasonBlackout, "new-year"},
		{"night before the blackout", "", ny, "US", "2026-12-31 22:00", "spread:2027-01-02 08:00", ReasonWindow, ""},
		{"blackout in Germany", "", berlin, "DE", "2027-01-01 09:00", "spread:2027-01-02 08:00", ReasonBlackout, "new-year"},
		{"not a blackout in France", "", paris, "FR", "2027-01-01 10:00", "2027-01-01 10:00", ReasonNone, ""},
		{"regional blackout, unknown region", "", ny, "", "2027-01-01 10:00", "2027-01-01 10:00", ReasonNone, ""},
		{"campaign override: Saturday", "reminder", ny, "US", "2027-03-13 10:00", "spread:2027-03-15 09:00", ReasonWindow, ""},
		{"campaign override: weekday 08:30", "reminder", ny, "US", "2027-03-10 08:30", "spread:2027-03-10 09:00", ReasonWindow, ""},
		{"campaign override: inside", "reminder", ny, "US", "2027-03-10 19:59", "2027-03-10 19:59", ReasonNone, ""},
		{"unknown campaign gets the default", "other", ny, "US", "2027-03-13 10:00", "2027-03-13 10:00", ReasonNone, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			due := at(t, c.loc, c.due)
			res := effective(t, p, Request{Due: due, Zones: []*time.Location{c.loc}, Region: c.region, Campaign: c.campaign, CallID: c.name})
			if spread, ok := cut(c.want, "spread:"); ok {
				open := at(t, c.loc, spread)
				if res.At.Before(open) || !res.At.Before(open.Add(10*time.Minute)) {
					t.Errorf("%v, want in [%v, +10m)", res.At.In(c.loc), open)
				}
			} else if want := at(t, c.loc, c.want); !res.At.Equal(want) {
				t.Errorf("%v, want %v", res.At.In(c.loc), want)
			}
			if res.Reason != c.reason || res.Blackout != c.blackout {
				t.Errorf("reason %v %q, want %v %q", res.Reason, res.Blackout, c.reason, c.blackout)
			}
		})
	}
}

func cut(s, prefix string) (string, bool) {
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):], true
	}
	return s, false
}

// The effective time keeps the due time's precision when nothing moves it.
func TestNeverBeforeDue(t *testing.T) {
	ny := zone(t, "America/New_York")
	due := at(t, ny, "2027-03-10 20:59").Add(59*time.Second + 999*time.Millisecond)
	res := effective(t, issuePolicy(t), Request{Due: due, Zones: []*time.Location{ny}})
	if !res.At.Equal(due) || res.Reason != ReasonNone {
		t.Errorf("%v %v, want the due time", res.At, res.Reason)
	}
}

// DST: a window bound that does not exist opens at the first instant after
// the gap; one that exists twice opens at its first occurrence, once. Four
// zones, among them Lord Howe (30-minute DST) and Kolkata (none).
func TestEffectiveAcrossDST(t *testing.T) {
	type tc struct {
		zone     string
		from, to string
		due      time.Time
		want     string // RFC 3339
	}
	ny := zone(t, "America/New_York")
	berlin := zone(t, "Europe/Berlin")
	lh := zone(t, "Australia/Lord_Howe")
	kolkata := zone(t, "Asia/Kolkata")
	cases := []tc{
		// New York springs forward 2026-03-08 02:00 -> 03:00: 02:30 does not exist.
		{"America/New_York", "02:30", "05:00", at(t, ny, "2026-03-08 00:00"), "2026-03-08T03:00:00-04:00"},
		{"America/New_York", "02:30", "05:00", at(t, ny, "2026-03-07 00:00"), "2026-03-07T02:30:00-05:00"},
		// Falls back 2026-11-01 02:00 -> 01:00: 01:30 happens twice; the window opens at the first.
		{"America/New_York", "01:30", "01:45", at(t, ny, "2026-11-01 00:00"), "2026-11-01T01:30:00-04:00"},
		// Due at the second 01:40 (EST), after the window
		// [01:30 EDT, 01:45 EDT) closed: the next day.
		{"America/New_York", "01:30", "01:45", time.Date(2026, 11, 1, 6, 40, 0, 0, time.UTC), "2026-11-02T01:30:00-05:00"},
		// The ordinary window on both DST days.
		{"America/New_York", "08:00", "21:00", at(t, ny, "2026-03-08 00:00"), "2026-03-08T08:00:00-04:00"},
		{"America/New_York", "08:00", "21:00", at(t, ny, "2026-11-01 00:00"), "2026-11-01T08:00:00-05:00"},
		// Berlin springs forward 2026-03-29 02:00 -> 03:00, falls back 2026-10-25 03:00 -> 02:00.
		{"Europe/Berlin", "02:30", "04:00", at(t, berlin, "2026-03-29 00:00"), "2026-03-29T03:00:00+02:00"},
		{"Europe/Berlin", "02:30", "04:00", at(t, berlin, "2026-10-25 00:00"), "2026-10-25T02:30:00+02:00"},
		{"Europe/Berlin", "08:00", "21:00", at(t, berlin, "2026-03-28 22:00"), "2026-03-29T08:00:00+02:00"},
		// Lord Howe springs forward 2026-10-04 02:00 +10:30 -> 02:30 +11,
		// falls back 2026-04-05 02:00 +11 -> 01:30 +10:30.
		{"Australia/Lord_Howe", "02:15", "03:00", at(t, lh, "2026-10-04 00:00"), "2026-10-04T02:30:00+11:00"},
		{"Australia/Lord_Howe", "01:45", "03:00", at(t, lh, "2026-04-05 00:00"), "2026-04-05T01:45:00+11:00"},
		{"Australia/Lord_Howe", "08:00", "21:00", at(t, lh, "2026-10-03 22:00"), "2026-10-04T08:00:00+11:00"},
		{"Australia/Lord_Howe", "08:00", "21:00", at(t, lh, "2026-04-04 22:00"), "2026-04-05T08:00:00+10:30"},
		// Kolkata: +05:30 all year.
		{"Asia/Kolkata", "08:00", "21:00", at(t, kolkata, "2026-03-08 23:00"), "2026-03-09T08:00:00+05:30"},
		{"Asia/Kolkata", "02:30", "05:00", at(t, kolkata, "2026-03-08 00:00"), "2026-03-08T02:30:00+05:30"},
	}
	for _, c := range cases {
		loc := zone(t, c.zone)
		p := mustParse(t, fmt.Sprintf("default: {open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: %q, to: %q}]}", c.from, c.to))
		res := effective(t, p, Request{Due: c.due, Zones: []*time.Location{loc}})
		if got := res.At.In(loc).Format(time.RFC3339); got != c.want {
			t.Errorf("%s %s-%s due %s: got %s, want %s", c.zone, c.from, c.to, c.due.In(loc).Format(time.RFC3339), got, c.want)
		}
	}
}

// A cap of 1 call per day defers the second call of the day to the next
// day's window: to the instant the first call leaves the rolling day when
// that is inside the window, else to the next opening.
func TestCapDefersToNextDay(t *testing.T) {
	ny := zone(t, "America/New_York")
	p := mustParse(t, "default: {cap: {calls: 1, per: 24h}}")
	zones := []*time.Location{ny}

	first := effective(t, p, Request{Due: at(t, ny, "2027-03-10 10:00"), Zones: zones, CallID: "a"})
	if !first.At.Equal(at(t, ny, "2027-03-10 10:00")) || first.Reason != ReasonNone {
		t.Fatalf("first call: %v %v", first.At.In(ny), first.Reason)
	}
	recent := []Call{{ID: "a", At: first.At}}
	second := effective(t, p, Request{Due: at(t, ny, "2027-03-10 15:00"), Zones: zones, CallID: "b", Recent: recent})
	if want := at(t, ny, "2027-03-11 10:00"); !second.At.Equal(want) || second.Reason != ReasonCap {
		t.Errorf("second call: %v %v, want %v cap", second.At.In(ny), second.Reason, want)
	}
	// A replay of the first call, which sees itself among the recent calls,
	// gets the same answer.
	replay := effective(t, p, Request{Due: at(t, ny, "2027-03-10 10:00"), Zones: zones, CallID: "a", Recent: recent})
	if !replay.At.Equal(first.At) {
		t.Errorf("replay: %v, want %v", replay.At.In(ny), first.At.In(ny))
	}
	// A call at 20:00 leaves the rolling day at 20:00 the next day, inside the window.
	late := effective(t, p, Request{Due: at(t, ny, "2027-03-10 20:30"), Zones: zones, CallID: "c", Recent: []Call{{ID: "x", At: at(t, ny, "2027-03-10 20:00")}}})
	if want := at(t, ny, "2027-03-11 20:00"); !late.At.Equal(want) || late.Reason != ReasonCap {
		t.Errorf("late: %v %v, want %v cap", late.At.In(ny), late.Reason, want)
	}
	// Cap 1 per 13 h: a call at 20:00 frees the cap at 09:00, inside the window.
	p12 := mustParse(t, "default: {cap: {calls: 1, per: 13h}, spread: 10m}")
	res := effective(t, p12, Request{Due: at(t, ny, "2027-03-10 20:30"), Zones: zones, CallID: "d", Recent: []Call{{ID: "x", At: at(t, ny, "2027-03-10 20:00")}}})
	if want := at(t, ny, "2027-03-11 09:00"); !res.At.Equal(want) || res.Reason != ReasonCap {
		t.Errorf("13 h cap: %v %v, want %v (inside the window: no spread)", res.At.In(ny), res.Reason, want)
	}
	// A cap that frees up at night defers to the opening, spread.
	p6 := mustParse(t, "default: {cap: {calls: 1, per: 6h}, spread: 10m}")
	res = effective(t, p6, Request{Due: at(t, ny, "2027-03-10 20:30"), Zones: zones, CallID: "e", Recent: []Call{{ID: "x", At: at(t, ny, "2027-03-10 20:00")}}})
	if open := at(t, ny, "2027-03-11 08:00"); res.At.Before(open) || !res.At.Before(open.Add(10*time.Minute)) || res.Reason != ReasonCap {
		t.Errorf("6 h cap: %v %v, want the 08:00 opening, spread", res.At.In(ny), res.Reason)
	}
}

// The cap counts calls in every rolling period that contains the call,
// planned ones after it too.
func TestCapRollingPeriods(t *testing.T) {
	utc := time.UTC
	always := "open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: \"00:00\", to: \"24:00\"}]"
	t0 := time.Date(2027, 3, 10, 12, 0, 0, 0, utc)
	h := time.Hour
	cases := []struct {
		name   string
		calls  int
		others []time.Duration // relative to the due time
		want   time.Duration   // effective, relative to the due time
	}{
		{"no others", 1, nil, 0},
		{"one before, within the day", 1, []time.Duration{-20 * h}, 4 * h},
		{"one a day before exactly", 1, []time.Duration{-24 * h}, 0},
		{"one planned after", 1, []time.Duration{20 * h}, 44 * h},
		{"two allowed, one each side 40 h apart", 2, []time.Duration{-20 * h, 20 * h}, 0},
		{"one allowed, one each side", 1, []time.Duration{-20 * h, 20 * h}, 44 * h},
		{"two allowed, two before", 2, []time.Duration{-23 * h, -1 * h}, 1 * h},
		{"three before, two allowed", 2, []time.Duration{-23 * h, -22 * h, -1 * h}, 2 * h},
		{"two at the same instant", 2, []time.Duration{0, 0}, 24 * h},
	}
	for _, c := range cases {
		p := mustParse(t, fmt.Sprintf("default: {%s, cap: {calls: %d, per: 1d}}", always, c.calls))
		var recent []Call
		for i, o := range c.others {
			recent = append(recent, Call{ID: fmt.Sprint(i), At: t0.Add(o)})
		}
		res := effective(t, p, Request{Due: t0, Zones: []*time.Location{utc}, CallID: "self", Recent: recent})
		if got := res.At.Sub(t0); got != c.want {
			t.Errorf("%s: effective due%+v, want due%+v", c.name, got, c.want)
		}
		if !capOracle(res.At, Cap{Calls: c.calls, Per: 24 * h}, recent) {
			t.Errorf("%s: %v breaks the cap", c.name, res.At)
		}
	}
}

// A number whose region spans zones is called only when every one of them
// is open: New York and Los Angeles share 11:00-21:00 New York time.
func TestSeveralZonesIntersect(t *testing.T) {
	ny := zone(t, "America/New_York")
	la := zone(t, "America/Los_Angeles")
	zones := []*time.Location{ny, la}
	cases := []struct{ due, want string }{ // Los Angeles time
		{"2027-03-10 06:00", "2027-03-10 08:00"}, // NY open, LA not yet
		{"2027-03-10 12:00", "2027-03-10 12:00"},
		{"2027-03-10 17:59", "2027-03-10 17:59"},
		{"2027-03-10 18:00", "2027-03-11 08:00"}, // NY closed at 21:00
	}
	for _, c := range cases {
		res := effective(t, Default(), Request{Due: at(t, la, c.due), Zones: zones})
		if want := at(t, la, c.want); !res.At.Equal(want) {
			t.Errorf("due %s LA: %v, want %s", c.due, res.At.In(la), c.want)
		}
	}
	// The spread stays inside the common window: LA 08:00 opening, NY's
	// window closes at 21:00 NY = 18:00 LA; a 12 h spread is cut at the close.
	p := mustParse(t, "default: {spread: 12h}")
	for i := range 200 {
		res := effective(t, p, Request{Due: at(t, la, "2027-03-10 06:00"), Zones: zones, CallID: fmt.Sprint("c", i)})
		if res.At.Before(at(t, la, "2027-03-10 08:00")) || !res.At.Before(at(t, la, "2027-03-10 18:00")) {
			t.Fatalf("spread outside the common window: %v", res.At.In(la))
		}
	}
}

// A US toll-free number has every zone of +1, from Guam to Newfoundland:
// the call goes when all of them are between 08:00 and 21:00.
func TestTollFreeNumberIntersection(t *testing.T) {
	n, err := phone.Parse("+18005551234")
	if err != nil {
		t.Fatal(err)
	}
	zones, err := phone.Zones("", n)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Date(2027, 3, 10, 0, 0, 0, 0, time.UTC)
	for i := range 48 {
		d := due.Add(time.Duration(i) * 37 * time.Minute)
		res := effective(t, Default(), Request{Due: d, Zones: zones, Region: n.Region})
		for _, z := range zones {
			if h := res.At.In(z).Hour(); h < 8 || h >= 21 {
				t.Fatalf("due %v: %v is %v in %s", d, res.At, res.At.In(z), z)
			}
		}
	}
}

func TestErrors(t *testing.T) {
	if _, err := Default().Effective(Request{Due: time.Now()}); !errors.Is(err, ErrNoZone) || !errors.Is(err, phone.ErrNoZone) {
		t.Errorf("no zone: %v", err)
	}
	// Kiritimati (+14) and Pago Pago (-11) are 25 h apart: their 09:00-10:00
	// windows never overlap.
	p := mustParse(t, `default: {open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "09:00", to: "10:00"}]}`)
	zones := []*time.Location{zone(t, "Pacific/Kiritimati"), zone(t, "Pacific/Pago_Pago")}
	_, err := p.Effective(Request{Due: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), Zones: zones})
	if !errors.Is(err, ErrNoOpening) {
		t.Errorf("disjoint windows: %v, want ErrNoOpening", err)
	}
	// Blackouts covering everything past the due time within the horizon.
	p = mustParse(t, `default: {blackouts: [{name: a, from: 2027-01-01, to: 2027-12-31}, {name: b, from: 2028-01-01, to: 2028-12-31}]}`)
	_, err = p.Effective(Request{Due: time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC), Zones: []*time.Location{time.UTC}})
	if !errors.Is(err, ErrNoOpening) {
		t.Errorf("blacked-out horizon: %v, want ErrNoOpening", err)
	}
}

// Calls deferred to one opening are spread over its first minutes, evenly
// and never past the window's close.
func TestSpread(t *testing.T) {
	ny := zone(t, "America/New_York")
	p := issuePolicy(t)
	open := at(t, ny, "2027-03-11 08:00")
	var perMinute [10]int
	for i := range 5000 {
		res := effective(t, p, Request{Due: at(t, ny, "2027-03-10 23:00"), Zones: []*time.Location{ny}, CallID: fmt.Sprintf("u%d-welcome", i)})
		off := res.At.Sub(open)
		if off < 0 || off >= 10*time.Minute || off%time.Second != 0 {
			t.Fatalf("offset %v", off)
		}
		perMinute[off/time.Minute]++
	}
	for m, n := range perMinute {
		if n < 400 || n > 600 { // 500 expected per minute
			t.Errorf("minute %d got %d of 5000 calls: %v", m, n, perMinute)
		}
	}
	// A window shorter than the spread: the spread stops at its close.
	short := mustParse(t, `default: {open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "08:00", to: "08:05"}], spread: 10m}`)
	for i := range 500 {
		res := effective(t, short, Request{Due: at(t, ny, "2027-03-10 23:00"), Zones: []*time.Location{ny}, CallID: fmt.Sprint(i)})
		if res.At.Before(open) || !res.At.Before(open.Add(5*time.Minute)) {
			t.Fatalf("short window: %v", res.At.In(ny))
		}
	}
	// Two adjoining rules (to 24:00, from 00:00) are one window: a call
	// deferred to 22:00 spreads past midnight.
	night := mustParse(t, `default: {open_hours: [{days: [wed], from: "22:00", to: "24:00"}, {days: [thu], from: "00:00", to: "06:00"}], spread: 4h}`)
	late := 0
	for i := range 500 {
		res := effective(t, night, Request{Due: at(t, ny, "2027-03-10 12:00"), Zones: []*time.Location{ny}, CallID: fmt.Sprint(i)})
		if res.At.Before(at(t, ny, "2027-03-10 22:00")) || !res.At.Before(at(t, ny, "2027-03-11 02:00")) {
			t.Fatalf("night window: %v", res.At.In(ny))
		}
		if !res.At.Before(at(t, ny, "2027-03-11 00:00")) {
			late++
		}
	}
	if late < 150 || late > 350 {
		t.Errorf("%d of 500 after midnight, want about half", late)
	}
}

func BenchmarkEffective(b *testing.B) {
	ny := zone(b, "America/New_York")
	p := issuePolicy(b)
	inside := Request{Due: at(b, ny, "2027-03-10 12:00"), Zones: []*time.Location{ny}, Region: "US", CallID: "c"}
	night := Request{Due: at(b, ny, "2027-03-10 23:00"), Zones: []*time.Location{ny}, Region: "US", CallID: "c"}
	n, _ := phone.Parse("+18005551234")
	tollFree, _ := phone.Zones("", n)
	many := Request{Due: at(b, ny, "2027-03-10 23:00"), Zones: tollFree, Region: "US", CallID: "c"}
	for _, c := range []struct {
		name string
		p    *Policy
		r    Request
	}{
		{"default/inside", Default(), inside},
		{"issue/inside", p, inside},
		{"issue/night", p, night},
		{"issue/night-capped", p, Request{Due: night.Due, Zones: night.Zones, Region: "US", CallID: "c", Recent: []Call{{ID: "a", At: night.Due.Add(-2 * time.Hour)}, {ID: "b", At: night.Due.Add(-time.Hour)}}}},
		{"default/night-42-zones", Default(), many},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.p.Effective(c.r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// capOracle checks the cap by brute force: no period [s, s+per) that starts
// at one of the calls and contains t holds more than Calls of them.
func capOracle(t time.Time, c Cap, recent []Call) bool {
	all := []time.Time{t}
	for _, r := range recent {
		all = append(all, r.At)
	}
	for _, s := range all {
		if t.Before(s) || !t.Before(s.Add(c.Per)) {
			continue
		}
		n := 0
		for _, x := range all {
			if !x.Before(s) && x.Before(s.Add(c.Per)) {
				n++
			}
		}
		if n > c.Calls {
			return false
		}
	}
	return true
}

func TestCapHistoryIsTheLargestCap(t *testing.T) {
	p, err := Parse([]byte(`{default: {cap: {calls: 3, per: 30d}}, campaigns: {promo: {cap: {calls: 40, per: 7d}}, quiet: {cap: none}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if calls, per := p.CapHistory(); calls != 40 || per != 30*24*time.Hour {
		t.Fatalf("CapHistory = %d, %v; want 40 calls and 30 days", calls, per)
	}
	if calls, per := (*Policy)(nil).CapHistory(); calls != 0 || per != 0 {
		t.Fatalf("no policy: %d, %v", calls, per)
	}
}

// A paused campaign calls nobody before the pause's end; its calls go at
// the first instant after it that the other rules allow, spread; other
// campaigns are not paused; the pause survives the encoding.
func TestPausedCampaign(t *testing.T) {
	doc := "default:\n  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: \"09:00\", to: \"17:00\"}]\n  spread: 10m\n" +
		"campaigns:\n  promo:\n    paused_until: 2026-12-01T12:00:00Z\n"
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	q, err := Decode(p.Encode())
	if err != nil || q.Version() != p.Version() {
		t.Fatalf("decode of the encoding: %v, version %s, want %s", err, q.Version(), p.Version())
	}
	utc := []*time.Location{time.UTC}
	due := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	r, err := q.Effective(Request{Due: due, Zones: utc, Campaign: "promo", CallID: "c1"})
	end := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if err != nil || r.Reason != ReasonPaused || r.At.Before(end) || !r.At.Before(end.Add(10*time.Minute)) {
		t.Fatalf("paused: %+v, %v; want paused, within the spread after %v", r, err, end)
	}
	// Due after the pause's end at night: the next window, as without a pause.
	night := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	if r, _ := q.Effective(Request{Due: night, Zones: utc, Campaign: "promo", CallID: "c1"}); r.Reason != ReasonWindow {
		t.Fatalf("after the pause: %+v", r)
	}
	if r, _ := q.Effective(Request{Due: due, Zones: utc, Campaign: "other", CallID: "c1"}); !r.At.Equal(due) {
		t.Fatalf("another campaign: %+v", r)
	}
	if _, err := Parse([]byte("campaigns:\n  promo:\n    paused_until: tomorrow\n")); err == nil || !strings.Contains(err.Error(), "paused_until") {
		t.Fatalf("a bad paused_until: %v", err)
	}
}
