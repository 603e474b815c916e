package policy

import (
	"slices"
	"time"

	"github.com/ivrsched/ivrsched/internal/calendar"
)

// compiled is a campaign's merged rules, ready to evaluate.
type compiled struct {
	rules     Rules
	week      [7][]span // by time.Weekday: open spans of the day, sorted, merged
	blackouts []Blackout
	cap       Cap
	spread    time.Duration
}

// span is an open period of a day, in wall-clock seconds after midnight.
type span struct{ from, to int }

func compile(r Rules) *compiled {
	c := &compiled{rules: r, blackouts: r.Blackouts}
	if r.Cap != nil {
		c.cap = *r.Cap
	}
	if r.Spread != nil {
		c.spread = *r.Spread
	}
	for _, o := range r.OpenHours {
		for _, d := range o.Days {
			c.week[d] = append(c.week[d], span{int(o.From), int(o.To)})
		}
	}
	for d, spans := range c.week {
		slices.SortFunc(spans, func(a, b span) int { return a.from - b.from })
		var merged []span
		for _, s := range spans {
			if n := len(merged); n > 0 && s.from <= merged[n-1].to {
				merged[n-1].to = max(merged[n-1].to, s.to)
				continue
			}
			merged = append(merged, s)
		}
		c.week[d] = merged
	}
	return c
}

// blackedOut returns the name of the first blackout covering a local date
// for a region ("" for an unknown region: only blackouts of every region
// apply).
func (c *compiled) blackedOut(d calendar.Date, region string) (string, bool) {
	for _, b := range c.blackouts {
		if d.Compare(b.From) < 0 || d.Compare(b.To) > 0 {
			continue
		}
		if len(b.Regions) == 0 || slices.Contains(b.Regions, region) {
			return b.Name, true
		}
	}
	return "", false
}

// zoneOpen finds, in one zone, the open interval [s, e) that contains t or,
// if none does, the first one after t. A span of a day is the interval
// between the instants its wall-clock bounds resolve to
// (calendar.At: a skipped time is the end of the gap, a repeated one its
// first occurrence); a span swallowed by a gap is no interval. When need
// is positive, e is extended across midnight into the next day's span that
// continues it, until it is the interval's real end or at least need past
// max(s, t), which is all the spread looks at. ok is false when nothing
// opens before limit.
func (c *compiled) zoneOpen(loc *time.Location, region string, t time.Time, need time.Duration, limit time.Time) (s, e time.Time, ok bool) {
	// The spans of earlier dates end by the first instant reading t's
	// date, which is not after t.
	first := calendar.DateOf(t, loc)
	last := calendar.DateOf(limit, loc)
	for day := first; day.Compare(last) <= 0; day = day.AddDays(1) {
		spans := c.week[day.Weekday()]
		if len(spans) == 0 {
			continue
		}
		if _, black := c.blackedOut(day, region); black {
			continue
		}
		for _, sp := range spans {
			e := calendar.At(day, sp.to, loc)
			if !e.After(t) {
				continue
			}
			s := calendar.At(day, sp.from, loc)
			if !e.After(s) {
				continue
			}
			if need > 0 {
				e = c.extend(loc, region, day, sp, e, later(s, t).Add(need))
			}
			return s, e, true
		}
	}
	return time.Time{}, time.Time{}, false
}

// extend moves the end e of the span sp of day across midnight while the
// next day's first span starts at 00:00 and is not blacked out, until e
// reaches want.
func (c *compiled) extend(loc *time.Location, region string, day calendar.Date, sp span, e, want time.Time) time.Time {
	for range 400 {
		if sp.to != 86400 || !e.Before(want) {
			return e
		}
		day = day.AddDays(1)
		next := c.week[day.Weekday()]
		if len(next) == 0 || next[0].from != 0 {
			return e
		}
		if _, black := c.blackedOut(day, region); black {
			return e
		}
		sp = next[0]
		e = calendar.At(day, sp.to, loc)
	}
	return e
}

// open finds the first instant at or after t that is open in every zone,
// and the end of that common interval (or a point at least need past the
// instant). ok is false when nothing opens before limit.
func (c *compiled) open(zones []*time.Location, region string, t time.Time, need time.Duration, limit time.Time) (s, e time.Time, ok bool) {
	t0 := t
	for !t0.After(limit) {
		moved := false
		e = time.Time{}
		for _, z := range zones {
			zs, ze, ok := c.zoneOpen(z, region, t0, need, limit)
			if !ok {
				return time.Time{}, time.Time{}, false
			}
			if zs.After(t0) {
				t0, moved = zs, true
				break
			}
			if e.IsZero() || ze.Before(e) {
				e = ze
			}
		}
		if !moved {
			return t0, e, true
		}
	}
	return time.Time{}, time.Time{}, false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
