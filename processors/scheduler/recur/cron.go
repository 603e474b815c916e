package recur

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/ivrsched/ivrsched/internal/calendar"
)

// Cron is a standard five-field cron expression, read in the user's local
// time: minute (0-59), hour (0-23), day of month (1-31), month (1-12 or
// jan-dec), day of week (0-7 or sun-sat, 0 and 7 both Sunday). A field is
// `*`, a value, a range `a-b`, a step `*/n` or `a-b/n`, or a list of
// those separated by commas. As in Vixie cron, when both the day of month
// and the day of week are restricted (neither starts with `*`), a day
// matching either matches; otherwise a day must match both. The
// macros @yearly (@annually), @monthly, @weekly, @daily (@midnight) and
// @hourly stand for their usual expressions. There is no seconds field and
// no zone prefix: the zone is the recipient's.
type Cron struct {
	expr                     string
	minute, hour, dom, month uint64 // bit i set: value i matches
	dow                      uint64 // bit 0 Sunday .. bit 6 Saturday
	domStar, dowStar         bool
	minutes, hours           []int // the set bits, ascending
}

var macros = map[string]string{
	"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
	"@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}

var monthNames = []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}
var dayNames = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// ParseCron reads a cron expression; the error names the field at fault
// and what it accepts.
func ParseCron(expr string) (*Cron, error) {
	src := strings.TrimSpace(expr)
	if m, ok := macros[strings.ToLower(src)]; ok {
		src = m
	}
	fields := strings.Fields(src)
	if len(fields) != 5 {
		return nil, fmt.Errorf("cron %q: %d fields, want 5 (minute hour day-of-month month day-of-week) or a macro such as @daily", expr, len(fields))
	}
	c := &Cron{expr: expr}
	specs := []struct {
		name    string
		lo, hi  int
		names   []string
		namesAt int
		out     *uint64
	}{
		{"minute", 0, 59, nil, 0, &c.minute},
		{"hour", 0, 23, nil, 0, &c.hour},
		{"day of month", 1, 31, nil, 0, &c.dom},
		{"month", 1, 12, monthNames, 1, &c.month},
		{"day of week", 0, 7, dayNames, 0, &c.dow},
	}
	for i, s := range specs {
		set, err := parseField(fields[i], s.lo, s.hi, s.names, s.namesAt)
		if err != nil {
			return nil, fmt.Errorf("cron %q: field %d (%s) %q: %v", expr, i+1, s.name, fields[i], err)
		}
		*s.out = set
	}
	if c.dow&(1<<7) != 0 {
		c.dow = c.dow&^(1<<7) | 1
	}
	c.domStar = strings.HasPrefix(fields[2], "*")
	c.dowStar = strings.HasPrefix(fields[4], "*")
	c.minutes, c.hours = setBits(c.minute), setBits(c.hour)
	return c, nil
}

func setBits(set uint64) []int {
	var out []int
	for set != 0 {
		i := bits.TrailingZeros64(set)
		out = append(out, i)
		set &^= 1 << i
	}
	return out
}

func parseField(f string, lo, hi int, names []string, namesAt int) (uint64, error) {
	var set uint64
	for _, part := range strings.Split(f, ",") {
		rng, stepStr, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n < 1 || n > hi {
				return 0, fmt.Errorf("step %q is not a whole number from 1 to %d", stepStr, hi)
			}
			step = n
		}
		var a, b int
		switch {
		case rng == "*":
			a, b = lo, hi
		case strings.Contains(rng, "-"):
			as, bs, _ := strings.Cut(rng, "-")
			var err error
			if a, err = value(as, lo, hi, names, namesAt); err != nil {
				return 0, err
			}
			if b, err = value(bs, lo, hi, names, namesAt); err != nil {
				return 0, err
			}
			if b < a {
				return 0, fmt.Errorf("range %q runs backwards", rng)
			}
		default:
			var err error
			if a, err = value(rng, lo, hi, names, namesAt); err != nil {
				return 0, err
			}
			b = a
			if hasStep {
				b = hi // a/n: from a to the end, as Vixie cron reads it
			}
		}
		for v := a; v <= b; v += step {
			set |= 1 << v
		}
	}
	return set, nil
}

func value(s string, lo, hi int, names []string, namesAt int) (int, error) {
	for i, n := range names {
		if strings.EqualFold(s, n) {
			return i + namesAt, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < lo || v > hi {
		accepted := fmt.Sprintf("%d-%d", lo, hi)
		if names != nil {
			accepted += " or " + names[0] + "-" + names[len(names)-1]
		}
		return 0, fmt.Errorf("%q is not a value; accepted: %s", s, accepted)
	}
	return v, nil
}

// String is the expression as written.
func (c *Cron) String() string { return c.expr }

func (c *Cron) matchDay(d calendar.Date) bool {
	if c.month&(1<<uint(d.Month)) == 0 {
		return false
	}
	domOK := c.dom&(1<<uint(d.Day)) != 0
	dowOK := c.dow&(1<<uint(d.Weekday())) != 0
	if c.domStar || c.dowStar { // as Vixie cron: "*/2" counts as a star
		return domOK && dowOK
	}
	return domOK || dowOK
}

// maxCronDays bounds Next's search: 29 February of a leap year can be
// eight years away (2096 to 2104).
const maxCronDays = 9 * 366

// Next is the first instant after `after` at which the expression matches
// the wall clock in loc. A matching wall time that a DST change skips
// fires at the first instant after the gap; one that a DST change repeats
// fires once, at its first occurrence. ok is false when nothing matches
// within nine years (such as 30 February).
func (c *Cron) Next(after time.Time, loc *time.Location) (time.Time, bool) {
	day := calendar.DateOf(after, loc)
	// On after's own date, a wall time not after after's reading resolves
	// to an instant not after it (calendar.At is the first instant reading
	// that time or later): start past it.
	from := calendar.SecondOfDay(after, loc)
	for range maxCronDays {
		if c.matchDay(day) {
			for _, h := range c.hours {
				if (h+1)*3600 <= from {
					continue
				}
				for _, m := range c.minutes {
					sec := h*3600 + m*60
					if sec <= from {
						continue
					}
					if x := calendar.At(day, sec, loc); x.After(after) {
						return x, true
					}
				}
			}
		}
		day, from = day.AddDays(1), -1
	}
	return time.Time{}, false
}
