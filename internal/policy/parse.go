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
)

// The grammar of a policy document (Parse shows one whole). The document is
// a mapping of three optional fields: default, the rules of every call;
// campaigns, a mapping from campaign id (Action.campaign_id) to rules that
// replace the default's field by field; and countries, the regions called
// (parse_blackouts.go). Rules (rules) are a mapping of six optional fields:
// open_hours (parse_hours.go), blackouts (parse_blackouts.go), cap, spread,
// retry (parse_retry.go) and paused_until; durations are read by
// parse_duration.go. A field left out keeps the default's, and the
// default's fields left out keep DefaultRules.
//
// The parser walks yaml.Node trees rather than decoding into structs, so
// that every problem carries its field's path and line, all problems are
// found in one pass (an operator fixes a document once, not once per error),
// and unknown or repeated fields are caught. Each step reads one field,
// reports what is wrong with the form it accepts, and returns what it could
// read; Parse returns a policy only when no step reported anything.

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

// String writes the problem as "path (line N): message".
func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", p.Path, p.Line, p.Msg)
	}
	return fmt.Sprintf("%s: %s", p.Path, p.Msg)
}

// Error writes the one problem, or the count and one problem a line.
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
// *Error. An empty input, or more than one YAML document, is one problem of
// "(document)": a policy is written whole, and {} is the default policy.
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

// parser collects the problems of one document; its methods read one field
// each.
type parser struct {
	problems []Problem
}

// fail reports a problem of the field at path, at n's line (0 without n).
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

// isNull says whether n is absent or an explicit null (~, null, or a key
// with no value).
func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// fields walks a mapping: each known key's value goes to its handler;
// unknown and repeated keys are problems (an unknown one lists the keys
// accepted). It returns false, having reported it, when n is not a mapping
// (what names the mapping expected); the caller then skips its checks of
// required fields.
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

// orDocument names the mapping at path in a problem ("the document" for the
// root).
func orDocument(path string) string {
	if path == "" {
		return "the document"
	}
	return path
}

// plainName matches the keys a path writes bare (a.b); others are quoted
// (a["b c"]), so that a path names its field unambiguously.
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

// index is the path of a list's i-th item.
func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// document reads the root mapping: default (rules), campaigns (a mapping of
// non-empty campaign ids, each once, to rules) and countries (a non-empty
// list of regions). Each is optional.
func (ps *parser) document(root *yaml.Node) (Rules, map[string]Rules, []string) {
	var def Rules
	var campaigns map[string]Rules
	var countries []string
	ps.fields("", root, "a mapping with default, campaigns and countries", map[string]func(string, *yaml.Node){
		"default": func(path string, v *yaml.Node) {
			def = ps.rules(path, v)
			if def.SuppressionExempt {
				ps.fail(join(path, "suppression_exempt"), v, "only a campaign may be exempted from the do-not-call list; name it under campaigns")
				def.SuppressionExempt = false
			}
		},
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

// rules reads one set of rules, each field optional: a field left out is
// nil in the Rules returned, and keeps the default's (merge). Two fields are
// read here: paused_until, an RFC 3339 instant in the years 2000 to 2199
// (kept in UTC), and spread, a duration up to MaxSpread.
func (ps *parser) rules(path string, n *yaml.Node) Rules {
	var r Rules
	ps.fields(path, n, "a mapping of rules (open_hours, blackouts, cap, spread, retry, paused_until, suppression_exempt)", map[string]func(string, *yaml.Node){
		"suppression_exempt": func(path string, v *yaml.Node) {
			v = deref(v)
			if v == nil || v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
				ps.fail(path, v, "%s is not a boolean; accepted: true or false", describe(v))
				return
			}
			r.SuppressionExempt, _ = strconv.ParseBool(v.Value)
		},
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

// cap reads the cap on calls per recipient: "none" (a zero Cap, no cap) or
// {calls: N, per: DURATION}, both required, calls a whole number from 1 to
// MaxCapCalls and per longer than 0 and at most MaxCapPer. It returns nil
// when n is not a mapping (reported).
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
