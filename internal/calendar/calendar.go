// Package calendar turns local calendar dates and wall-clock times into
// instants in an IANA time zone, with one rule across daylight-saving
// changes: a wall time that does not exist (the hour skipped when clocks
// spring forward) becomes the first instant after the gap, and a wall time
// that exists twice (the hour repeated when clocks fall back) becomes its
// first occurrence, so it happens once.
//
// Go's time.Date leaves both cases unspecified ("the choice of time zone,
// and therefore the time, is not guaranteed"); the calling policy and the
// recurrences need an answer that is the same on every machine.
package calendar

import (
	"fmt"
	"time"
)

// Date is a calendar date without a zone.
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// DateOf is t's calendar date in loc.
func DateOf(t time.Time, loc *time.Location) Date {
	y, m, d := t.In(loc).Date()
	return Date{y, m, d}
}

// ParseDate reads a date written YYYY-MM-DD.
func ParseDate(s string) (Date, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return Date{}, fmt.Errorf("%q is not a date of the form YYYY-MM-DD", s)
	}
	return Date{t.Year(), t.Month(), t.Day()}, nil
}

// AddDays is the date n days later (earlier when n < 0).
func (d Date) AddDays(n int) Date {
	if n == 1 && d.Day < 28 {
		return Date{d.Year, d.Month, d.Day + 1}
	}
	y, m, dd := time.Date(d.Year, d.Month, d.Day+n, 12, 0, 0, 0, time.UTC).Date()
	return Date{y, m, dd}
}

// Weekday is the day of the week of d.
func (d Date) Weekday() time.Weekday {
	// Sakamoto's method for the Gregorian calendar.
	t := [...]int{0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4}
	y := d.Year
	if d.Month < 3 {
		y--
	}
	return time.Weekday(((y+y/4-y/100+y/400+t[d.Month-1]+d.Day)%7 + 7) % 7)
}

// Compare returns -1, 0 or +1 as d is before, equal to or after e.
func (d Date) Compare(e Date) int {
	switch {
	case d.Year != e.Year:
		return cmp(d.Year, e.Year)
	case d.Month != e.Month:
		return cmp(int(d.Month), int(e.Month))
	default:
		return cmp(d.Day, e.Day)
	}
}

func cmp(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// String is the date as YYYY-MM-DD.
func (d Date) String() string { return fmt.Sprintf("%04d-%02d-%02d", d.Year, d.Month, d.Day) }

// At is the instant at which the wall clock in loc first reads the date d
// and the time sec seconds after its midnight (sec may be 86400 or more: the
// following days' wall times). A wall time skipped by a DST change gives the
// first instant after the gap (02:30 on a spring-forward night in New York
// is 03:00 EDT); a wall time that occurs twice gives the first occurrence
// (01:30 on a fall-back night in New York is 01:30 EDT).
func At(d Date, sec int, loc *time.Location) time.Time {
	// Most wall times are more than a day from any offset change: then Go's
	// answer is the only one.
	g := time.Date(d.Year, d.Month, d.Day, 0, 0, sec, 0, loc)
	if start, end := g.ZoneBounds(); (start.IsZero() || g.Sub(start) > 26*time.Hour) && (end.IsZero() || end.Sub(g) > 26*time.Hour) {
		return g
	}
	// The wall time written as if it were UTC; an instant t has wall time
	// w in loc when t + offset(t) == w.
	w := time.Date(d.Year, d.Month, d.Day, 0, 0, sec, 0, time.UTC)
	// Every offset in use within a day either side (offsets are within
	// ±14 h, so a matching instant lies within w ± 14 h).
	var offs [3]int
	for i, probe := range [3]time.Duration{-26 * time.Hour, 0, 26 * time.Hour} {
		_, offs[i] = w.Add(probe).In(loc).Zone()
	}
	var best time.Time
	for i, o := range offs {
		if i > 0 && (o == offs[0] || (i == 2 && o == offs[1])) {
			continue
		}
		c := w.Add(-time.Duration(o) * time.Second)
		if _, co := c.In(loc).Zone(); co == o && (best.IsZero() || c.Before(best)) {
			best = c
		}
	}
	if !best.IsZero() {
		return best
	}
	// A gap: no instant shows w. The first valid instant after it is the
	// transition that skips it: walk zone periods from the earliest
	// candidate until the wall clock passes w.
	x := w.Add(-time.Duration(max(offs[0], offs[1], offs[2])) * time.Second)
	for range 8 {
		if wall(x, loc).After(w) {
			return x
		}
		_, end := x.In(loc).ZoneBounds()
		if end.IsZero() {
			break
		}
		x = end
	}
	return g
}

// wall is t's wall-clock reading in loc, written as a UTC time.
func wall(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	y, m, d := l.Date()
	hh, mm, ss := l.Clock()
	return time.Date(y, m, d, hh, mm, ss, l.Nanosecond(), time.UTC)
}

// SecondOfDay is how many wall-clock seconds after its local midnight t
// reads in loc (0 to 86399).
func SecondOfDay(t time.Time, loc *time.Location) int {
	hh, mm, ss := t.In(loc).Clock()
	return hh*3600 + mm*60 + ss
}
