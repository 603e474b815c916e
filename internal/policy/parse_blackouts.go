package policy

import (
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ivrsched/ivrsched/internal/calendar"
)

// Blackouts: a list of named spans of whole local days on which no call is
// placed,
//
//	{name: NAME, from: YYYY-MM-DD, to: YYYY-MM-DD, regions: [US, ...]}
//
// name and from are required; to defaults to from (a single day) and is not
// before it; a blackout lasts at most MaxBlackoutDays. Dates are in the
// years 2000 to 2199. regions limits a blackout to recipients in those
// ISO 3166-1 alpha-2 regions; left out, it holds everywhere. The same
// region codes make the document's countries list.

// blackouts reads the list of blackouts (see above). Unlike open_hours, an
// empty list is accepted: it lifts the default's blackouts for a campaign.
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

// daysBetween counts the days from a to b (negative when b is before a).
func daysBetween(a, b calendar.Date) int {
	ta := time.Date(a.Year, a.Month, a.Day, 12, 0, 0, 0, time.UTC)
	tb := time.Date(b.Year, b.Month, b.Day, 12, 0, 0, 0, time.UTC)
	return int(tb.Sub(ta).Hours() / 24)
}

// date reads a calendar date, YYYY-MM-DD, in the years 2000 to 2199.
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

// regions reads a non-empty list of ISO 3166-1 alpha-2 region codes, in
// capitals, of the regions known (regions.go), and returns them sorted and
// without repeats; empty is the problem of an empty list, which means
// something else for a blackout than for countries. A code not known is
// reported and left out.
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
