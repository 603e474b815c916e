package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ivrsched/ivrsched/internal/calendar"
)

// ErrInvalid is what every *Error matches with errors.Is.
var ErrInvalid = errors.New("invalid policy")

// Error lists every problem found in a policy document.
type Error struct {
	Problems []Problem
}

// Problem is one invalid field.
type Problem struct {
	Path string // the field, e.g. "default.open_hours[0].from"
	Line int    // 1-based line in the document; 0 when not known
	Msg  string // what is wrong and what is accepted
}

func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", p.Path, p.Line, p.Msg)
	}
	return fmt.Sprintf("%s: %s", p.Path, p.Msg)
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("invalid policy")
	if len(e.Problems) == 1 {
		b.WriteString(": ")
		b.WriteString(e.Problems[0].String())
		return b.String()
	}
	fmt.Fprintf(&b, ", %d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Parse reads a policy document, YAML or JSON:
//
//	default:
//	  open_hours:                 # in the recipient's local time
//	    - days: [mon, tue, wed, thu, fri, sat, sun]
//	      from: "08:00"
//	      to: "21:00"
//	  blackouts:
//	    - name: new-year
//	      from: 2027-01-01
//	      to: 2027-01-01
//	      regions: [US, DE]       # omitted: everywhere
//	  cap: {calls: 2, per: 24h}   # omitted or "none": no cap
//	  spread: 10m
//	  retry:                      # omitted or "none": no retries
//	    max_attempts: 3           # the first included
//	    max_age: 1d               # from the first attempt's requested time
//	    no-answer: {delay: 10m, max_delay: 2h, jitter: 0.2}
//	    busy: {delay: 5m}
//	campaigns:
//	  reminder:
//	    open_hours: [{days: [mon, tue, wed, thu, fri], from: "09:00", to: "20:00"}]
//	countries: [US, CA]           # omitted: every country; else only these
//
// Every problem is reported, each with its field's path and line and the
// form the field accepts; an unknown field is a problem. The error is an
// *Error.
func Parse(data []byte) (*Policy, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{[]Problem{{Path: "(document)", Msg: "empty; write at least {} for the default policy"}}}
		}
		return nil, &Error{[]Problem{{Path: "(document)", Msg: "not YAML or JSON: " + err.Error()}}}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &Error{[]Problem{{Path: "(document)", Line: extra.Line, Msg: "more than one YAML document; write one"}}}
	}
	ps := &parser{}
	def, campaigns, countries := ps.document(&root)
	if len(ps.problems) > 0 {
		return nil, &Error{ps.problems}
	}
	return build(def, campaigns, countries)
}

type parser struct {
	problems []Problem
}

func (ps *parser) fail(path string, n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	ps.problems = append(ps.problems, Problem{Path: path, Line: line, Msg: fmt.Sprintf(format, args...)})
}

// deref follows a document node and aliases to the value node.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && (n.Kind == yaml.DocumentNode || n.Kind == yaml.AliasNode) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		} else if len(n.Content) > 0 {
			n = n.Content[0]
		} else {
			return nil
		}
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// fields walks a mapping: each known key's value goes to its handler;
// unknown and repeated keys are problems.
func (ps *parser) fields(path string, n *yaml.Node, what string, handlers map[string]func(path string, v *yaml.Node)) bool {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		ps.fail(path, n, "must be %s", what)
		return false
	}
	known := make([]string, 0, len(handlers))
	for k := range handlers {
		known = append(known, k)
	}
	slices.Sort(known)
	seen := make(map[string]bool)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			ps.fail(path, n.Content[i], "has a key that is not a name")
			continue
		}
		sub := join(path, k.Value)
		h, ok := handlers[k.Value]
		switch {
		case !ok:
			ps.fail(sub, k, "unknown field; %s accepts %s", orDocument(path), strings.Join(known, ", "))
		case seen[k.Value]:
			ps.fail(sub, k, "appears twice")
		default:
			seen[k.Value] = true
			h(sub, v)
		}
	}
	return true
}

func orDocument(path string) string {
	if path == "" {
		return "the document"
	}
	return path
}

var plainName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func join(path, key string) string {
	if !plainName.MatchString(key) {
		key = strconv.Quote(key)
		if path == "" {
			return "[" + key + "]"
		}
		return path + "[" + key + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

func (ps *parser) document(root *yaml.Node) (Rules, map[string]Rules, []string) {
	var def Rules
	var campaigns map[string]Rules
	var countries []string
	ps.fields("", root, "a mapping with default, campaigns and countries", map[string]func(string, *yaml.Node){
		"default": func(path string, v *yaml.Node) { def = ps.rules(path, v) },
		"countries": func(path string, v *yaml.Node) {
			countries = ps.regions(path, v, "is empty: no call would be placed; leave countries out to call every country")
		},
		"campaigns": func(path string, v *yaml.Node) {
			v = deref(v)
			if v == nil || v.Kind != yaml.MappingNode {
				ps.fail(path, v, "must be a mapping from campaign id (Action.campaign_id) to rules")
				return
			}
			campaigns = make(map[string]Rules)
			for i := 0; i+1 < len(v.Content); i += 2 {
				k := deref(v.Content[i])
				if k == nil || k.Kind != yaml.ScalarNode || k.Value == "" {
					ps.fail(path, v.Content[i], "a campaign id must be a non-empty name")
					continue
				}
				sub := join(path, k.Value)
				if _, dup := campaigns[k.Value]; dup {
					ps.fail(sub, k, "appears twice")
					continue
				}
				campaigns[k.Value] = ps.rules(sub, v.Content[i+1])
			}
		},
	})
	return def, campaigns, countries
}

func (ps *parser) rules(path string, n *yaml.Node) Rules {
	var r Rules
	ps.fields(path, n, "a mapping of rules (open_hours, blackouts, cap, spread, retry, paused_until)", map[string]func(string, *yaml.Node){
		"paused_until": func(path string, v *yaml.Node) {
			v = deref(v)
			var t time.Time
			err := errors.New("not a scalar")
			if v != nil && v.Kind == yaml.ScalarNode {
				t, err = time.Parse(time.RFC3339, v.Value)
			}
			switch {
			case err != nil:
				ps.fail(path, v, "%s is not a time; accepted: RFC 3339, like 2026-12-01T09:30:00Z", describe(v))
			case t.Year() < 2000 || t.Year() > 2199:
				ps.fail(path, v, "%s is outside the years 2000 to 2199", v.Value)
			default:
				t = t.UTC()
				r.PausedUntil = &t
			}
		},
		"retry":      func(path string, v *yaml.Node) { r.Retry = ps.retry(path, v) },
		"open_hours": func(path string, v *yaml.Node) { r.OpenHours = ps.openHours(path, v) },
		"blackouts":  func(path string, v *yaml.Node) { r.Blackouts = ps.blackouts(path, v) },
		"cap":        func(path string, v *yaml.Node) { r.Cap = ps.cap(path, v) },
		"spread": func(path string, v *yaml.Node) {
			d, ok := ps.duration(path, v)
			switch {
			case !ok:
			case d > MaxSpread:
				ps.fail(path, v, "%s is longer than the limit of %s", formatDuration(d), formatDuration(MaxSpread))
			default:
				r.Spread = &d
			}
		},
	})
	return r
}

// sequence returns the items of a sequence node, or reports that it is not one.
func (ps *parser) sequence(path string, n *yaml.Node, what string) ([]*yaml.Node, bool) {
	n = deref(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		ps.fail(path, n, "must be a list of %s", what)
		return nil, false
	}
	return n.Content, true
}

const openHoursForm = `{days: [mon, ...], from: "HH:MM", to: "HH:MM"}`

func (ps *parser) openHours(path string, n *yaml.Node) []OpenHours {
	items, ok := ps.sequence(path, n, openHoursForm)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		ps.fail(path, n, "is empty: calls would never be placed; list at least one %s", openHoursForm)
		return nil
	}
	out := make([]OpenHours, 0, len(items))
	for i, item := range items {
		sub := index(path, i)
		var o OpenHours
		var haveDays, haveFrom, haveTo bool
		if !ps.fields(sub, item, "a mapping "+openHoursForm, map[string]func(string, *yaml.Node){
			"days": func(path string, v *yaml.Node) { o.Days, haveDays = ps.days(path, v) },
			"from": func(path string, v *yaml.Node) { o.From, haveFrom = ps.clock(path, v, false) },
			"to":   func(path string, v *yaml.Node) { o.To, haveTo = ps.clock(path, v, true) },
		}) {
			continue
		}
		ps.required(sub, item, "days", haveDays, "from", haveFrom, "to", haveTo)
		if haveFrom && haveTo && o.To <= o.From {
			ps.fail(join(sub, "to"), item, "%s is not after from %s; a window that crosses midnight is two rules (from to 24:00, and 00:00 to)", o.To, o.From)
		}
		out = append(out, o)
	}
	return out
}

// required reports each of the named fields (name, present pairs) that is
// missing and has no problem reported yet.
func (ps *parser) required(path string, n *yaml.Node, pairs ...any) {
	for i := 0; i+1 < len(pairs); i += 2 {
		name, have := pairs[i].(string), pairs[i+1].(bool)
		if !have && !ps.reported(join(path, name)) {
			ps.fail(join(path, name), n, "is required")
		}
	}
}

// reported tells whether a problem was already reported for path.
func (ps *parser) reported(path string) bool {
	for _, p := range ps.problems {
		if p.Path == path || strings.HasPrefix(p.Path, path+"[") || strings.HasPrefix(p.Path, path+".") {
			return true
		}
	}
	return false
}

var dayNames = map[string]time.Weekday{
	"mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday, "thu": time.Thursday,
	"fri": time.Friday, "sat": time.Saturday, "sun": time.Sunday,
}

// dayOrder sorts weekdays Monday first.
func dayOrder(d time.Weekday) int { return (int(d) + 6) % 7 }

func (ps *parser) days(path string, n *yaml.Node) ([]time.Weekday, bool) {
	items, ok := ps.sequence(path, n, "days (mon, tue, wed, thu, fri, sat, sun)")
	if !ok {
		return nil, false
	}
	if len(items) == 0 {
		ps.fail(path, n, "is empty; list days from mon, tue, wed, thu, fri, sat, sun")
		return nil, false
	}
	var days []time.Weekday
	good := true
	for i, item := range items {
		item = deref(item)
		var d time.Weekday
		ok := item != nil && item.Kind == yaml.ScalarNode
		if ok {
			d, ok = dayNames[strings.ToLower(item.Value)]
		}
		if !ok {
			ps.fail(index(path, i), item, "%s is not a day; accepted: mon, tue, wed, thu, fri, sat, sun", describe(item))
			good = false
			continue
		}
		if slices.Contains(days, d) {
			ps.fail(index(path, i), item, "%s appears twice", item.Value)
			good = false
			continue
		}
		days = append(days, d)
	}
	slices.SortFunc(days, func(a, b time.Weekday) int { return dayOrder(a) - dayOrder(b) })
	return days, good
}

// describe quotes a scalar's text, or names the node's kind.
func describe(n *yaml.Node) string {
	switch {
	case n == nil || isNull(n):
		return "nothing"
	case n.Kind == yaml.ScalarNode:
		return strconv.Quote(n.Value)
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	}
	return "this"
}

var clockForm = regexp.MustCompile(`^([0-9]{2}):([0-9]{2})$`)

func (ps *parser) clock(path string, n *yaml.Node, end bool) (Clock, bool) {
	n = deref(n)
	const form = `accepted: "HH:MM", 24-hour, 00:00 to 23:59 (24:00 as an end)`
	if n == nil || n.Kind != yaml.ScalarNode {
		ps.fail(path, n, "%s is not a time; %s", describe(n), form)
		return 0, false
	}
	m := clockForm.FindStringSubmatch(n.Value)
	if m == nil {
		ps.fail(path, n, "%s is not a time; %s", describe(n), form)
		return 0, false
	}
	hh, _ := strconv.Atoi(m[1])
	mm, _ := strconv.Atoi(m[2])
	switch {
	case hh == 24 && mm == 0 && end:
		return 86400, true
	case hh > 23 || mm > 59:
		ps.fail(path, n, "%s is not a time of day; %s", describe(n), form)
		return 0, false
	}
	return Clock(hh*3600 + mm*60), true
}

func (ps *parser) blackouts(path string, n *yaml.Node) []Blackout {
	items, ok := ps.sequence(path, n, `{name: NAME, from: YYYY-MM-DD, to: YYYY-MM-DD, regions: [US, ...]}`)
	if !ok {
		return nil
	}
	out := make([]Blackout, 0, len(items))
	for i, item := range items {
		sub := index(path, i)
		var b Blackout
		var haveName, haveFrom, haveTo bool
		if !ps.fields(sub, item, "a mapping {name, from, to, regions}", map[string]func(string, *yaml.Node){
			"name": func(path string, v *yaml.Node) {
				v = deref(v)
				if v == nil || v.Kind != yaml.ScalarNode || isNull(v) || strings.TrimSpace(v.Value) == "" {
					ps.fail(path, v, "must be a non-empty name")
					return
				}
				b.Name, haveName = v.Value, true
			},
			"from": func(path string, v *yaml.Node) { b.From, haveFrom = ps.date(path, v) },
			"to":   func(path string, v *yaml.Node) { b.To, haveTo = ps.date(path, v) },
			"regions": func(path string, v *yaml.Node) {
				b.Regions = ps.regions(path, v, "is empty; leave regions out for a blackout everywhere")
			},
		}) {
			continue
		}
		if !haveName && !ps.reported(join(sub, "name")) {
			ps.fail(join(sub, "name"), item, "is required")
		}
		if !haveFrom && !ps.reported(join(sub, "from")) {
			ps.fail(join(sub, "from"), item, "is required (YYYY-MM-DD)")
		}
		if !haveTo && !ps.reported(join(sub, "to")) {
			b.To, haveTo = b.From, haveFrom // a single day
		}
		if haveFrom && haveTo {
			switch days := daysBetween(b.From, b.To) + 1; {
			case days < 1:
				ps.fail(join(sub, "to"), item, "%s is before from %s", b.To, b.From)
			case days > MaxBlackoutDays:
				ps.fail(join(sub, "to"), item, "the blackout is %d days long, the limit is %d", days, MaxBlackoutDays)
			}
		}
		out = append(out, b)
	}
	return out
}

func daysBetween(a, b calendar.Date) int {
	ta := time.Date(a.Year, a.Month, a.Day, 12, 0, 0, 0, time.UTC)
	tb := time.Date(b.Year, b.Month, b.Day, 12, 0, 0, 0, time.UTC)
	return int(tb.Sub(ta).Hours() / 24)
}

func (ps *parser) date(path string, n *yaml.Node) (calendar.Date, bool) {
	n = deref(n)
	if n == nil || n.Kind != yaml.ScalarNode {
		ps.fail(path, n, "%s is not a date; accepted: YYYY-MM-DD", describe(n))
		return calendar.Date{}, false
	}
	d, err := calendar.ParseDate(n.Value)
	if err != nil {
		ps.fail(path, n, "%s is not a date; accepted: YYYY-MM-DD", describe(n))
		return calendar.Date{}, false
	}
	if d.Year < 2000 || d.Year > 2199 {
		ps.fail(path, n, "%s is out of range; accepted: years 2000 to 2199", describe(n))
		return calendar.Date{}, false
	}
	return d, true
}

// regions reads a list of region codes; empty says what is wrong with an
// empty list.
func (ps *parser) regions(path string, n *yaml.Node, empty string) []string {
	items, ok := ps.sequence(path, n, "ISO 3166-1 alpha-2 region codes (US, DE, ...)")
	if !ok {
		return nil
	}
	if len(items) == 0 {
		ps.fail(path, n, "%s", empty)
		return nil
	}
	var out []string
	for i, item := range items {
		item = deref(item)
		if item == nil || item.Kind != yaml.ScalarNode || !regions[item.Value] {
			ps.fail(index(path, i), item, "%s is not a region; accepted: an ISO 3166-1 alpha-2 code in capitals, like US or DE", describe(item))
			continue
		}
		if !slices.Contains(out, item.Value) {
			out = append(out, item.Value)
		}
	}
	slices.Sort(out)
	return out
}

// wholeNumber reads v as a whole number from lo to hi; anything else is an
// error of the field at path: "... is not a number of <what>; accepted:
// <accepted>".
func (ps *parser) wholeNumber(path string, v *yaml.Node, lo, hi int, what, accepted string) (int, bool) {
	v = deref(v)
	k, err := 0, error(nil)
	if v != nil && v.Kind == yaml.ScalarNode && v.Tag == "!!int" {
		k, err = strconv.Atoi(v.Value)
	} else {
		err = errors.New("not a whole number")
	}
	if err != nil || k < lo || k > hi {
		ps.fail(path, v, "%s is not a number of %s; accepted: %s", describe(v), what, accepted)
		return 0, false
	}
	return k, true
}

func (ps *parser) cap(path string, n *yaml.Node) *Cap {
	n = deref(n)
	if n != nil && n.Kind == yaml.ScalarNode && n.Value == "none" {
		return &Cap{}
	}
	c := &Cap{}
	var haveCalls, havePer bool
	if !ps.fields(path, n, `{calls: N, per: DURATION} or "none"`, map[string]func(string, *yaml.Node){
		"calls": func(path string, v *yaml.Node) {
			calls, ok := ps.wholeNumber(path, v, 1, MaxCapCalls, "calls", fmt.Sprintf("a whole number from 1 to %d", MaxCapCalls))
			if !ok {
				return
			}
			c.Calls, haveCalls = calls, true
		},
		"per": func(path string, v *yaml.Node) {
			d, ok := ps.duration(path, v)
			switch {
			case !ok:
			case d <= 0 || d > MaxCapPer:
				ps.fail(path, v, "%s is out of range; accepted: longer than 0 and at most %s", formatDuration(d), formatDuration(MaxCapPer))
			default:
				c.Per, havePer = d, true
			}
		},
	}) {
		return nil
	}
	ps.required(path, n, "calls", haveCalls, "per", havePer)
	return c
}

var daysForm = regexp.MustCompile(`^([0-9]+)d$`)

const durationForm = `accepted: a duration such as 10m, 1h30m, 24h or 7d (d = 24h), in whole seconds`

func (ps *parser) duration(path string, n *yaml.Node) (time.Duration, bool) {
	n = deref(n)
	if n == nil || n.Kind != yaml.ScalarNode || isNull(n) {
		ps.fail(path, n, "%s is not a duration; %s", describe(n), durationForm)
		return 0, false
	}
	d, err := ParseDuration(n.Value)
	if err != nil {
		ps.fail(path, n, "%s is not a duration; %s", describe(n), durationForm)
		return 0, false
	}
	return d, true
}

// ParseDuration reads a duration as the policy writes it: Go's form (10m,
// 1h30m, 24h) or whole days (7d, a day being 24 h), in whole seconds, not
// negative.
func ParseDuration(s string) (time.Duration, error) {
	var d time.Duration
	if m := daysForm.FindStringSubmatch(s); m != nil {
		n, err := strconv.Atoi(m[1])
		if err != nil || n > 100000 {
			return 0, fmt.Errorf("%q: too many days", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, err
		}
	}
	if d < 0 || d%time.Second != 0 {
		return 0, fmt.Errorf("%q: negative or not whole seconds", s)
	}
	return d, nil
}

// formatDuration writes a duration in the form ParseDuration reads,
// shortest first: 7d, 24h written as 1d, 1h30m, 10m, 45s.
func formatDuration(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

const backoffForm = `{delay: DURATION, max_delay: DURATION, jitter: 0 to 0.9}`

// retry reads the retry rules: "none", or the outcomes retried with their
// backoff, max_attempts and max_age.
func (ps *parser) retry(path string, n *yaml.Node) *Retry {
	n = deref(n)
	if n != nil && n.Kind == yaml.ScalarNode && n.Value == "none" {
		return &Retry{}
	}
	r := &Retry{Outcomes: map[string]Backoff{}, MaxAttempts: DefaultMaxAttempts, MaxAge: DefaultMaxAge}
	handlers := map[string]func(string, *yaml.Node){
		"max_attempts": func(path string, v *yaml.Node) {
			k, ok := ps.wholeNumber(path, v, 1, MaxAttempts, "attempts", fmt.Sprintf("a whole number from 1 to %d, the first attempt included", MaxAttempts))
			if !ok {
				return
			}
			r.MaxAttempts = k
		},
		"max_age": func(path string, v *yaml.Node) {
			d, ok := ps.duration(path, v)
			switch {
			case !ok:
			case d <= 0 || d > MaxRetryAge:
				ps.fail(path, v, "%s is out of range; accepted: longer than 0 and at most %s", formatDuration(d), formatDuration(MaxRetryAge))
			default:
				r.MaxAge = d
			}
		},
	}
	for _, o := range RetriedOutcomes {
		handlers[o] = func(path string, v *yaml.Node) {
			if b, ok := ps.backoff(path, v); ok {
				r.Outcomes[o] = b
			}
		}
	}
	if !ps.fields(path, n, `"none" or a mapping of the outcomes retried (busy, no-answer, failed, machine) with max_attempts and max_age`, handlers) {
		return nil
	}
	if len(r.Outcomes) == 0 && !ps.reported(path) {
		ps.fail(path, n, "retries no outcome; list at least one of %s with %s, or write none", strings.Join(RetriedOutcomes, ", "), backoffForm)
	}
	return r
}

// retryDelay reads a retry delay (1 s to MaxRetryDelay); anything else is
// an error of the field at path, and def is kept.
func (ps *parser) retryDelay(path string, v *yaml.Node, def time.Duration) (time.Duration, bool) {
	d, ok := ps.duration(path, v)
	switch {
	case !ok:
		return def, false
	case d < time.Second || d > MaxRetryDelay:
		ps.fail(path, v, "%s is out of range; accepted: 1s to %s", formatDuration(d), formatDuration(MaxRetryDelay))
		return def, false
	}
	return d, true
}

func (ps *parser) backoff(path string, n *yaml.Node) (Backoff, bool) {
	b := Backoff{MaxDelay: DefaultMaxDelay, Jitter: DefaultJitter}
	var haveDelay, haveMax bool
	good := ps.fields(path, n, "a mapping "+backoffForm, map[string]func(string, *yaml.Node){
		"delay":     func(path string, v *yaml.Node) { b.Delay, haveDelay = ps.retryDelay(path, v, b.Delay) },
		"max_delay": func(path string, v *yaml.Node) { b.MaxDelay, haveMax = ps.retryDelay(path, v, b.MaxDelay) },
		"jitter": func(path string, v *yaml.Node) {
			v = deref(v)
			f, err := 0.0, error(nil)
			if v != nil && v.Kind == yaml.ScalarNode && (v.Tag == "!!float" || v.Tag == "!!int") {
				f, err = strconv.ParseFloat(v.Value, 64)
			} else {
				err = errors.New("not a number")
			}
			if err != nil || !(f >= 0 && f <= MaxJitter) { // NaN too
				ps.fail(path, v, "%s is not a jitter; accepted: a fraction from 0 to %g of the delay", describe(v), MaxJitter)
				return
			}
			b.Jitter = f
		},
	})
	if !good {
		return b, false
	}
	ps.required(path, n, "delay", haveDelay)
	if !haveDelay {
		return b, false
	}
	switch {
	case !haveMax:
		b.MaxDelay = max(b.MaxDelay, b.Delay)
	case b.MaxDelay < b.Delay:
		ps.fail(join(path, "max_delay"), n, "%s is shorter than delay %s", formatDuration(b.MaxDelay), formatDuration(b.Delay))
		return b, false
	}
	return b, true
}
