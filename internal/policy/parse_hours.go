package policy

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Open hours: a list of windows of the recipient's local week, each
//
//	{days: [mon, ...], from: "HH:MM", to: "HH:MM"}
//
// with every field required. A call is placed only inside one of them. Days
// are the three-letter English names, in any case, each once; times are
// 24-hour "HH:MM" from 00:00 to 23:59, and to may be 24:00 (the end of the
// day). A window ends after it starts: one that crosses midnight is written
// as two. An empty list is an error (no call would ever be placed); leaving
// open_hours out keeps the default's (08:00 to 21:00 every day).

// openHoursForm is the form of a window, as problems show it.
const openHoursForm = `{days: [mon, ...], from: "HH:MM", to: "HH:MM"}`

// openHours reads the list of windows (see above). A window with a problem
// is still returned, so that the checks after it run; Parse discards the
// result then.
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

// dayNames are the days a window accepts (matched in lower case).
var dayNames = map[string]time.Weekday{
	"mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday, "thu": time.Thursday,
	"fri": time.Friday, "sat": time.Saturday, "sun": time.Sunday,
}

// dayOrder sorts weekdays Monday first.
func dayOrder(d time.Weekday) int { return (int(d) + 6) % 7 }

// days reads a non-empty list of day names, each once, and returns them
// Monday first; false when any was wrong (each reported).
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

// clockForm matches "HH:MM"; its ranges are checked after.
var clockForm = regexp.MustCompile(`^([0-9]{2}):([0-9]{2})$`)

// clock reads a time of day as seconds after midnight, 00:00 to 23:59; an
// end (to) may also be 24:00, the end of the day, so that a window can reach
// midnight.
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
