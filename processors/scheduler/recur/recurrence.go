// Package recur computes the occurrences of a recurring follow-up: every N
// (exact elapsed time, or calendar days that keep the wall-clock time), or
// a five-field cron expression in the user's local time, with an optional
// count or end. Occurrences follow the wall clock across DST: a weekly
// Monday 10:00 fires at 10:00 local before and after the change; a wall
// time the change skips fires at the first instant after the gap, one it
// repeats fires once.
//
// Occurrences are computed from the series' requested times, never from
// where a calling policy moved them, so deferrals do not make a series
// drift. A Recurrence is immutable and safe for concurrent use.
package recur

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/ivrsched/ivrsched/internal/calendar"
)

// Limits of a recurrence.
const (
	MinEvery = time.Minute          // the shortest period
	MaxEvery = 366 * 24 * time.Hour // the longest period
	MaxCount = 100000               // the most occurrences a count may ask
)

// ErrInvalid is what every error of New matches with errors.Is.
var ErrInvalid = errors.New("invalid recurrence")

// Recurrence says when a follow-up repeats. Exactly one of Every, Days and
// Cron is set.
type Recurrence struct {
	// Every is an exact period: occurrence n is at first + n×Every,
	// whatever the wall clock reads (every: 90m, 36h).
	Every time.Duration
	// Days is a period in calendar days (every: 1d, 7d, 2w): occurrence n
	// is n×Days local dates after the first, at the first's wall-clock time.
	Days int
	// Cron is a cron expression in the recipient's local time.
	Cron *Cron
	// Count is how many occurrences there are in all, the first included;
	// 0 is no limit.
	Count int
	// Until: no occurrence is after it; zero is no limit.
	Until time.Time
}

var calendarForm = regexp.MustCompile(`^([0-9]+)([dw])$`)

// New makes a recurrence from its written form: every is a duration (10m,
// 90m, 36h: exact elapsed time) or a number of days or weeks (1d, 7d, 2w:
// calendar days at the same local wall-clock time); cron is a five-field
// cron expression (ParseCron). Exactly one of every and cron is given.
// count 0 and a zero until mean no limit. The error names the field.
func New(every, cron string, count int, until time.Time) (Recurrence, error) {
	invalid := func(field, format string, args ...any) (Recurrence, error) {
		return Recurrence{}, fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
	}
	var r Recurrence
	switch {
	case every == "" && cron == "":
		return invalid("every", "give every (a period such as 7d or 90m) or cron (such as \"0 10 * * mon\")")
	case every != "" && cron != "":
		return invalid("cron", "give every or cron, not both")
	case cron != "":
		c, err := ParseCron(cron)
		if err != nil {
			return invalid("cron", "%v", err)
		}
		r.Cron = c
	default:
		if m := calendarForm.FindStringSubmatch(every); m != nil {
			n, err := strconv.Atoi(m[1])
			if m[2] == "w" {
				n *= 7
			}
			if err != nil || n < 1 || n > int(MaxEvery/(24*time.Hour)) {
				return invalid("every", "%q is out of range; accepted: 1d to %dd", every, int(MaxEvery/(24*time.Hour)))
			}
			r.Days = n
		} else {
			d, err := time.ParseDuration(every)
			if err != nil || d < MinEvery || d > MaxEvery {
				return invalid("every", "%q is not a period; accepted: a duration from 1m to 8784h (exact time, like 90m or 36h) or days or weeks (1d, 7d, 2w: the same local time each day)", every)
			}
			r.Every = d
		}
	}
	if count < 0 || count > MaxCount {
		return invalid("count", "%d is out of range; accepted: 0 (no limit) to %d", count, MaxCount)
	}
	r.Count, r.Until = count, until
	return r, nil
}

// Next is the occurrence after the n-th (n ≥ 1 occurrences so far, the
// first included) of a series that started at first, whose latest
// occurrence was at prev (both as requested, before any policy moved
// them), in the recipient's zone loc. ok is false when the series is over:
// Count reached, or the next occurrence after Until.
func (r Recurrence) Next(first, prev time.Time, n int, loc *time.Location) (next time.Time, ok bool) {
	if r.Count > 0 && n >= r.Count {
		return time.Time{}, false
	}
	switch {
	case r.Cron != nil:
		next, ok = r.Cron.Next(prev, loc)
	case r.Days > 0:
		d := calendar.DateOf(first, loc).AddDays(n * r.Days)
		next = calendar.At(d, calendar.SecondOfDay(first, loc), loc).Add(time.Duration(first.Nanosecond()))
		ok = next.After(prev)
	case r.Every > 0:
		next = first.Add(time.Duration(n) * r.Every)
		ok = next.After(prev)
	}
	if !ok || (!r.Until.IsZero() && next.After(r.Until)) {
		return time.Time{}, false
	}
	return next, true
}
