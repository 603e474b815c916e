package policy

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/calendar"
)

func mustParse(t testing.TB, doc string) *Policy {
	t.Helper()
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, doc)
	}
	return p
}

func weekdays(ds ...time.Weekday) []time.Weekday { return ds }

// The issue's example file parses as written, to these rules.
func TestParseIssueExample(t *testing.T) {
	doc, err := os.ReadFile("../../testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := mustParse(t, string(doc))
	spread := 10 * time.Minute
	want := Rules{
		OpenHours: []OpenHours{{Days: allDays(), From: 8 * 3600, To: 21 * 3600}},
		Blackouts: []Blackout{{Name: "new-year", From: calendar.Date{Year: 2027, Month: 1, Day: 1}, To: calendar.Date{Year: 2027, Month: 1, Day: 1}, Regions: []string{"DE", "US"}}},
		Cap:       &Cap{Calls: 2, Per: 24 * time.Hour},
		Spread:    &spread,
		Retry:     &Retry{},
	}
	if !reflect.DeepEqual(p.Default, want) {
		t.Errorf("default:\n got %+v\nwant %+v", p.Default, want)
	}
	reminder := p.RulesFor("reminder")
	wantOpen := []OpenHours{{Days: weekdays(time.Monday, time.Tuesday, time.Wednesday, time.Thursday, time.Friday), From: 9 * 3600, To: 20 * 3600}}
	if !reflect.DeepEqual(reminder.OpenHours, wantOpen) {
		t.Errorf("reminder open hours: %+v", reminder.OpenHours)
	}
	// The override replaces open_hours only; the rest is the default's.
	if !reflect.DeepEqual(reminder.Blackouts, want.Blackouts) || *reminder.Cap != *want.Cap || *reminder.Spread != spread {
		t.Errorf("reminder inherits: %+v", reminder)
	}
	if got := p.RulesFor("unknown-campaign"); !reflect.DeepEqual(got, p.Default) {
		t.Errorf("unknown campaign gets %+v, want the default", got)
	}
	if len(p.Version()) != 16 {
		t.Errorf("version %q", p.Version())
	}
}

// The same policy as JSON, with keys in another order and other spellings
// of the same values, has the same version; its canonical encoding is a
// document that parses back to it.
func TestVersionAndEncoding(t *testing.T) {
	doc, _ := os.ReadFile("../../testdata/policy.yaml")
	a := mustParse(t, string(doc))
	b := mustParse(t, `{
	"campaigns": {"reminder": {"open_hours": [{"to": "20:00", "from": "09:00", "days": ["fri", "thu", "wed", "tue", "mon"]}]}},
	"default": {
		"spread": "600s",
		"cap": {"per": "1d", "calls": 2},
		"blackouts": [{"name": "new-year", "from": "2027-01-01", "regions": ["DE", "US"]}],
		"open_hours": [{"days": ["MON", "Tue", "wed", "thu", "fri", "sat", "sun"], "from": "08:00", "to": "21:00"}]
	}
}`)
	if a.Version() != b.Version() {
		t.Errorf("versions differ: %s %s\n%s\n%s", a.Version(), b.Version(), a.Encode(), b.Encode())
	}
	enc := a.Encode()
	c, err := Decode(enc)
	if err != nil {
		t.Fatalf("Decode(Encode): %v\n%s", err, enc)
	}
	if c.Version() != a.Version() || string(c.Encode()) != string(enc) {
		t.Errorf("round trip changed the policy:\n%s\n%s", enc, c.Encode())
	}
	const wantEnc = `{"default":{"open_hours":[{"days":["mon","tue","wed","thu","fri","sat","sun"],"from":"08:00","to":"21:00"}],"blackouts":[{"name":"new-year","from":"2027-01-01","to":"2027-01-01","regions":["DE","US"]}],"cap":{"calls":2,"per":"1d"},"spread":"10m"},"campaigns":{"reminder":{"open_hours":[{"days":["mon","tue","wed","thu","fri"],"from":"09:00","to":"20:00"}]}}}`
	if string(enc) != wantEnc {
		t.Errorf("encoding:\n got %s\nwant %s", enc, wantEnc)
	}
	// Any change of content changes the version.
	d := mustParse(t, strings.Replace(string(doc), "spread: 10m", "spread: 11m", 1))
	if d.Version() == a.Version() {
		t.Error("a changed spread kept the version")
	}
}

func TestDefaults(t *testing.T) {
	def := Default()
	empty := mustParse(t, `{}`)
	onlyDefault := mustParse(t, "default: {}\n")
	if def.Version() != empty.Version() || def.Version() != onlyDefault.Version() {
		t.Errorf("Default %s, {} %s, default: {} %s", def.Version(), empty.Version(), onlyDefault.Version())
	}
	r := def.Default
	if len(r.OpenHours) != 1 || r.OpenHours[0].From != 8*3600 || r.OpenHours[0].To != 21*3600 || len(r.OpenHours[0].Days) != 7 {
		t.Errorf("default open hours %+v", r.OpenHours)
	}
	if len(r.Blackouts) != 0 || r.Cap.Calls != 0 || *r.Spread != 0 {
		t.Errorf("default rules %+v", r)
	}
	// A document setting only a spread keeps the other defaults.
	p := mustParse(t, "default: {spread: 5m}\n")
	if *p.Default.Spread != 5*time.Minute || !reflect.DeepEqual(p.Default.OpenHours, r.OpenHours) {
		t.Errorf("partial default %+v", p.Default)
	}
}

// An override replaces each field it sets, whole; blackouts: [] and
// cap: none switch the default's off for the campaign.
func TestOverrides(t *testing.T) {
	p := mustParse(t, `
default:
  blackouts: [{name: shutdown, from: 2027-12-24, to: 2027-12-31}]
  cap: {calls: 1, per: 1d}
  spread: 10m
campaigns:
  urgent: {blackouts: [], cap: none, spread: 0s}
  holidays-only: {blackouts: [{name: xmas, from: 2027-12-25}]}
  same: {}
`)
	u := p.RulesFor("urgent")
	if u.Blackouts == nil || len(u.Blackouts) != 0 || u.Cap.Calls != 0 || *u.Spread != 0 {
		t.Errorf("urgent %+v", u)
	}
	h := p.RulesFor("holidays-only")
	if len(h.Blackouts) != 1 || h.Blackouts[0].Name != "xmas" || h.Blackouts[0].To != h.Blackouts[0].From || h.Cap.Calls != 1 {
		t.Errorf("holidays-only %+v", h)
	}
	if !reflect.DeepEqual(p.RulesFor("same"), p.Default) {
		t.Errorf("same %+v", p.RulesFor("same"))
	}
}

// Each invalid field is reported with its path, its line, and the form it
// accepts.
func TestParseErrors(t *testing.T) {
	cases := []struct {
		name, doc string
		want      []string // each must appear in the error
	}{
		{"unknown top-level field", "defaults: {}\n", []string{"defaults (line 1): unknown field; the document accepts campaigns, countries, default"}},
		{"unknown rule field", "default: {open_hour: []}\n", []string{"default.open_hour (line 1): unknown field; default accepts blackouts, cap, open_hours, paused_until, retry, spread"}},
		{"unknown field in a campaign's window", "campaigns:\n  reminder:\n    open_hours: [{days: [mon], from: \"09:00\", to: \"10:00\", tz: UTC}]\n",
			[]string{"campaigns.reminder.open_hours[0].tz (line 3): unknown field; campaigns.reminder.open_hours[0] accepts days, from, to"}},
		{"time without leading zero", "default: {open_hours: [{days: [mon], from: \"8:00\", to: \"21:00\"}]}\n",
			[]string{`default.open_hours[0].from (line 1): "8:00" is not a time; accepted: "HH:MM"`}},
		{"time out of range", "default: {open_hours: [{days: [mon], from: \"08:00\", to: \"25:00\"}]}\n", []string{`default.open_hours[0].to (line 1): "25:00" is not a time of day`}},
		{"24:00 as a start", "default: {open_hours: [{days: [mon], from: \"24:00\", to: \"24:00\"}]}\n", []string{`default.open_hours[0].from (line 1): "24:00" is not a time of day`}},
		{"to before from", "default: {open_hours: [{days: [mon], from: \"22:00\", to: \"06:00\"}]}\n", []string{"default.open_hours[0].to (line 1): 06:00 is not after from 22:00", "crosses midnight"}},
		{"bad day", "default: {open_hours: [{days: [mon, monday], from: \"08:00\", to: \"21:00\"}]}\n", []string{`default.open_hours[0].days[1] (line 1): "monday" is not a day; accepted: mon, tue, wed, thu, fri, sat, sun`}},
		{"repeated day", "default: {open_hours: [{days: [mon, mon], from: \"08:00\", to: \"21:00\"}]}\n", []string{`default.open_hours[0].days[1] (line 1): mon appears twice`}},
		{"missing fields", "default: {open_hours: [{days: [mon]}]}\n", []string{"default.open_hours[0].from (line 1): is required", "default.open_hours[0].to (line 1): is required"}},
		{"no open hours", "default: {open_hours: []}\n", []string{"default.open_hours (line 1): is empty: calls would never be placed"}},
		{"open hours not a list", "default: {open_hours: mon}\n", []string{"default.open_hours (line 1): must be a list of"}},
		{"bad date", "default:\n  blackouts:\n    - {name: x, from: 2027-02-30}\n", []string{`default.blackouts[0].from (line 3): "2027-02-30" is not a date; accepted: YYYY-MM-DD`}},
		{"date as words", "default: {blackouts: [{name: x, from: tomorrow}]}\n", []string{`default.blackouts[0].from (line 1): "tomorrow" is not a date`}},
		{"to before from date", "default: {blackouts: [{name: x, from: 2027-01-02, to: 2027-01-01}]}\n", []string{"default.blackouts[0].to (line 1): 2027-01-01 is before from 2027-01-02"}},
		{"blackout too long", "default: {blackouts: [{name: x, from: 2027-01-01, to: 2028-12-31}]}\n", []string{"the blackout is 731 days long, the limit is 366"}},
		{"blackout without name", "default: {blackouts: [{from: 2027-01-01}]}\n", []string{"default.blackouts[0].name (line 1): is required"}},
		{"bad region", "default: {blackouts: [{name: x, from: 2027-01-01, regions: [US, usa, de, ZZ]}]}\n", []string{
			`default.blackouts[0].regions[1] (line 1): "usa" is not a region; accepted: an ISO 3166-1 alpha-2 code in capitals, like US or DE`,
			`regions[2] (line 1): "de" is not a region`, `regions[3] (line 1): "ZZ" is not a region`}},
		{"cap of zero calls", "default: {cap: {calls: 0, per: 24h}}\n", []string{"default.cap.calls (line 1): \"0\" is not a number of calls; accepted: a whole number from 1 to 1000"}},
		{"cap calls as text", "default: {cap: {calls: two, per: 24h}}\n", []string{`default.cap.calls (line 1): "two" is not a number of calls`}},
		{"cap per zero", "default: {cap: {calls: 1, per: 0s}}\n", []string{"default.cap.per (line 1): 0s is out of range; accepted: longer than 0 and at most 366d"}},
		{"cap per negative", "default: {cap: {calls: 1, per: -1h}}\n", []string{`default.cap.per (line 1): "-1h" is not a duration; accepted: a duration such as 10m, 1h30m, 24h or 7d`}},
		{"cap without per", "default: {cap: {calls: 1}}\n", []string{"default.cap.per (line 1): is required"}},
		{"cap as a number", "default: {cap: 3}\n", []string{`default.cap (line 1): must be {calls: N, per: DURATION} or "none"`}},
		{"spread too long", "default: {spread: 13h}\n", []string{"default.spread (line 1): 13h is longer than the limit of 12h"}},
		{"spread not a duration", "default: {spread: ten minutes}\n", []string{`default.spread (line 1): "ten minutes" is not a duration`}},
		{"spread empty", "default: {spread: }\n", []string{`default.spread (line 1): nothing is not a duration`}},
		{"fractional seconds", "default: {spread: 1.5s}\n", []string{`"1.5s" is not a duration`}},
		{"repeated key", "default: {spread: 1m}\ndefault: {spread: 2m}\n", []string{"default (line 2): appears twice"}},
		{"campaign not a mapping", "campaigns: [reminder]\n", []string{"campaigns (line 1): must be a mapping from campaign id"}},
		{"campaign rules not a mapping", "campaigns: {reminder: weekdays}\n", []string{"campaigns.reminder (line 1): must be a mapping of rules"}},
		{"campaign id with a dot", "campaigns: {\"a.b\": {spread: x}}\n", []string{`campaigns["a.b"].spread (line 1): "x" is not a duration`}},
		{"not a mapping", "- default\n", []string{"(line 1): must be a mapping with default, campaigns and countries"}},
		{"empty", "# nothing\n", []string{"(document): empty"}},
		{"not YAML", "default: {spread: [\n", []string{"(document): not YAML or JSON"}},
		{"two documents", "default: {}\n---\ndefault: {}\n", []string{"more than one YAML document"}},
		{"JSON error", `{"default": {"cap": {"calls": 2, "per": "24 hours"}}}`, []string{`default.cap.per (line 1): "24 hours" is not a duration`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			var perr *Error
			if !errors.As(err, &perr) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse: %v, want an *Error", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nlacks %q", err, w)
				}
			}
		})
	}
}

// Every problem of a document is reported at once, in document order.
func TestParseReportsEveryProblem(t *testing.T) {
	_, err := Parse([]byte(`default:
  open_hours: [{days: [mon], from: "8", to: "21:00"}]
  spread: 1y
campaigns:
  a: {cap: {calls: -1, per: 1d}, colour: red}
`))
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("%v", err)
	}
	var paths []string
	for _, p := range perr.Problems {
		paths = append(paths, p.Path)
	}
	want := []string{"default.open_hours[0].from", "default.spread", "campaigns.a.cap.calls", "campaigns.a.colour"}
	if !reflect.DeepEqual(paths, want) {
		t.Errorf("paths %v, want %v\n%v", paths, want, err)
	}
	if !strings.HasPrefix(err.Error(), "invalid policy, 4 problems:\n  default.open_hours[0].from (line 2)") {
		t.Errorf("message:\n%v", err)
	}
}

// YAML anchors work; YAML 1.1 surprises do not apply (NO is a name, an
// unquoted 08:00 is a time).
func TestParseYAMLForms(t *testing.T) {
	p := mustParse(t, `
default:
  open_hours: &weekdays [{days: [mon, tue, wed, thu, fri], from: 08:00, to: 18:00}]
  blackouts: [{name: constitution-day, from: 2027-05-17, regions: [NO]}]
campaigns:
  b: {open_hours: *weekdays}
`)
	if p.Default.OpenHours[0].From != 8*3600 || p.Default.Blackouts[0].Regions[0] != "NO" {
		t.Errorf("%+v", p.Default)
	}
	if !reflect.DeepEqual(p.RulesFor("b").OpenHours, p.Default.OpenHours) {
		t.Errorf("alias: %+v", p.RulesFor("b").OpenHours)
	}
}

func TestDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{"10m": 10 * time.Minute, "1h30m": 90 * time.Minute, "7d": 7 * 24 * time.Hour, "0s": 0, "45s": 45 * time.Second} {
		d, err := ParseDuration(in)
		if err != nil || d != want {
			t.Errorf("ParseDuration(%q) = %v, %v", in, d, err)
		}
	}
	for d, want := range map[time.Duration]string{0: "0s", 50 * time.Second: "50s", 90 * time.Second: "1m30s", 10 * time.Minute: "10m", time.Hour: "1h", 90 * time.Minute: "1h30m", 48 * time.Hour: "2d", 25 * time.Hour: "25h", time.Hour + time.Second: "1h0m1s"} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := ParseDuration(formatDuration(d)); err != nil || back != d {
			t.Errorf("ParseDuration(formatDuration(%v)) = %v, %v", d, back, err)
		}
	}
	for _, bad := range []string{"", "1.5s", "-1m", "1 day", "d", "999999999d"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) accepted", bad)
		}
	}
}
