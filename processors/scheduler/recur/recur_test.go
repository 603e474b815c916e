package recur

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func at(t testing.TB, loc *time.Location, s string) time.Time {
	t.Helper()
	v, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustCron(t testing.TB, expr string) *Cron {
	t.Helper()
	c, err := ParseCron(expr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// occurrences lists the next n occurrences after start, as RFC 3339 in loc.
func occurrences(c *Cron, start time.Time, n int, loc *time.Location) []string {
	var out []string
	t := start
	for range n {
		next, ok := c.Next(t, loc)
		if !ok {
			out = append(out, "none")
			break
		}
		out = append(out, next.In(loc).Format(time.RFC3339))
		t = next
	}
	return out
}

// A weekly Monday 10:00 fires at 10:00 local on both sides of a DST
// change, in four zones, as cron and as "every 7d".
func TestWeeklyAcrossDST(t *testing.T) {
	cases := []struct {
		zone, cron, first string
		want              []string
	}{
		{"America/New_York", "0 10 * * mon", "2026-03-02 10:00", []string{"2026-03-09T10:00:00-04:00", "2026-03-16T10:00:00-04:00"}},
		{"America/New_York", "0 10 * * 1", "2026-10-26 10:00", []string{"2026-11-02T10:00:00-05:00", "2026-11-09T10:00:00-05:00"}},
		{"Europe/Berlin", "0 10 * * MON", "2026-03-23 10:00", []string{"2026-03-30T10:00:00+02:00", "2026-04-06T10:00:00+02:00"}},
		{"Europe/Berlin", "0 10 * * 1", "2026-10-19 10:00", []string{"2026-10-26T10:00:00+01:00", "2026-11-02T10:00:00+01:00"}},
		// Lord Howe changes on Sundays by 30 minutes: Sunday 10:00 both sides.
		{"Australia/Lord_Howe", "0 10 * * sun", "2026-09-27 10:00", []string{"2026-10-04T10:00:00+11:00", "2026-10-11T10:00:00+11:00"}},
		{"Australia/Lord_Howe", "0 10 * * 0", "2026-03-29 10:00", []string{"2026-04-05T10:00:00+10:30", "2026-04-12T10:00:00+10:30"}},
		{"Asia/Kolkata", "30 9 * * 1", "2026-03-02 09:30", []string{"2026-03-09T09:30:00+05:30", "2026-03-16T09:30:00+05:30"}},
	}
	for _, c := range cases {
		loc := zone(t, c.zone)
		first := at(t, loc, c.first)
		if got := occurrences(mustCron(t, c.cron), first, 2, loc); strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s %q after %s: %v, want %v", c.zone, c.cron, c.first, got, c.want)
		}
		// The same series as "every 7d" (n occurrences so far).
		r, err := New("7d", "", 0, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		prev := first
		for n, want := range c.want {
			next, ok := r.Next(first, prev, n+1, loc)
			if !ok || next.In(loc).Format(time.RFC3339) != want {
				t.Errorf("%s every 7d #%d: %v %v, want %s", c.zone, n+1, next.In(loc), ok, want)
			}
			prev = next
		}
	}
}

// "every 168h" is exact time: across the change the wall clock moves.
func TestEveryIsExactTime(t *testing.T) {
	ny := zone(t, "America/New_York")
	r, err := New("168h", "", 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	first := at(t, ny, "2026-03-02 10:00")
	next, ok := r.Next(first, first, 1, ny)
	if !ok || next.In(ny).Format(time.RFC3339) != "2026-03-09T11:00:00-04:00" {
		t.Errorf("168h: %v", next.In(ny))
	}
	r, _ = New("90m", "", 0, time.Time{})
	next, _ = r.Next(first, first.Add(90*time.Minute), 2, ny)
	if !next.Equal(first.Add(3 * time.Hour)) {
		t.Errorf("90m #3: %v", next)
	}
}

// Wall times a DST change skips fire at the end of the gap, once; wall
// times it repeats fire once, at the first occurrence.
func TestCronDSTGapsAndRepeats(t *testing.T) {
	ny := zone(t, "America/New_York")
	berlin := zone(t, "Europe/Berlin")
	lh := zone(t, "Australia/Lord_Howe")
	cases := []struct {
		loc   *time.Location
		cron  string
		after string
		want  []string
	}{
		{ny, "30 2 * * *", "2026-03-07 02:30", []string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{ny, "*/20 2 * * *", "2026-03-07 02:40", []string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"}},
		{ny, "30 1 * * *", "2026-10-31 01:30", []string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{ny, "*/15 1 * * *", "2026-10-31 23:00", []string{"2026-11-01T01:00:00-04:00", "2026-11-01T01:15:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-01T01:45:00-04:00", "2026-11-02T01:00:00-05:00"}},
		{berlin, "30 2 * * *", "2026-03-28 12:00", []string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"}},
		{berlin, "30 2 * * *", "2026-10-24 12:00", []string{"2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"}},
		{lh, "15 2 * * *", "2026-10-03 12:00", []string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"}},
		{lh, "45 1 * * *", "2026-04-04 12:00", []string{"2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"}},
	}
	for _, c := range cases {
		got := occurrences(mustCron(t, c.cron), at(t, c.loc, c.after), len(c.want), c.loc)
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s %q after %s:\n got %v\nwant %v", c.loc, c.cron, c.after, got, c.want)
		}
	}
}

func TestCronCalendar(t *testing.T) {
	utc := time.UTC
	cases := []struct {
		cron, after string
		want        []string
	}{
		// Day of month and day of week both restricted: either matches.
		{"0 9 13 * fri", "2026-02-01 00:00", []string{"2026-02-06T09:00:00Z", "2026-02-13T09:00:00Z", "2026-02-20T09:00:00Z"}},
		{"0 0 29 2 *", "2026-01-01 00:00", []string{"2028-02-29T00:00:00Z"}},
		{"0 0 30 2 *", "2026-01-01 00:00", []string{"none"}},
		{"@monthly", "2026-01-31 00:00", []string{"2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"}},
		{"@weekly", "2026-01-01 00:00", []string{"2026-01-04T00:00:00Z"}},
		{"0 12 * jan-mar/2 mon-fri", "2026-01-30 12:00", []string{"2026-03-02T12:00:00Z"}},
		{"5,10 8-9 * * 7", "2026-01-03 23:59", []string{"2026-01-04T08:05:00Z", "2026-01-04T08:10:00Z", "2026-01-04T09:05:00Z"}},
		{"10/20 * * * *", "2026-01-01 00:00", []string{"2026-01-01T00:10:00Z", "2026-01-01T00:30:00Z", "2026-01-01T00:50:00Z", "2026-01-01T01:10:00Z"}},
	}
	for _, c := range cases {
		got := occurrences(mustCron(t, c.cron), at(t, utc, c.after), len(c.want), utc)
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%q after %s:\n got %v\nwant %v", c.cron, c.after, got, c.want)
		}
	}
}

func TestCronErrors(t *testing.T) {
	cases := []struct{ expr, want string }{
		{"* * * *", "4 fields, want 5"},
		{"60 * * * *", `field 1 (minute) "60": "60" is not a value; accepted: 0-59`},
		{"0 24 * * *", `field 2 (hour) "24"`},
		{"0 0 0 * *", `field 3 (day of month) "0"`},
		{"0 0 * 13 *", `field 4 (month) "13": "13" is not a value; accepted: 1-12 or jan-dec`},
		{"0 0 * * 8", `field 5 (day of week) "8"`},
		{"0 0 * * funday", `"funday" is not a value; accepted: 0-7 or sun-sat`},
		{"*/0 * * * *", `step "0" is not a whole number`},
		{"5-1 * * * *", `range "5-1" runs backwards`},
		{"@every 5m", "2 fields"},
	}
	for _, c := range cases {
		_, err := ParseCron(c.expr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseCron(%q): %v, want %q", c.expr, err, c.want)
		}
	}
}

// In UTC (no DST) Next is the first minute after `after` whose fields
// match, found here by scanning minute by minute with the time package.
func TestCronAgainstMinuteScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	field := func(lo, hi int) string {
		switch rng.IntN(6) {
		case 0:
			return "*"
		case 1:
			return fmt.Sprint(lo + rng.IntN(hi-lo+1))
		case 2:
			a := lo + rng.IntN(hi-lo+1)
			return fmt.Sprintf("%d-%d", a, a+rng.IntN(hi-a+1))
		case 3:
			return fmt.Sprintf("*/%d", 1+rng.IntN(hi/2+1))
		case 4:
			return fmt.Sprintf("%d,%d", lo+rng.IntN(hi-lo+1), lo+rng.IntN(hi-lo+1))
		}
		a := lo + rng.IntN(hi-lo+1)
		return fmt.Sprintf("%d-%d/%d", a, a+rng.IntN(hi-a+1), 1+rng.IntN(3))
	}
	inField := func(f string, v, lo, hi int) bool {
		set, err := parseField(f, lo, hi, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return set&(1<<v) != 0
	}
	for range 300 {
		expr := strings.Join([]string{field(0, 59), field(0, 23), field(1, 31), field(1, 12), field(0, 6)}, " ")
		c := mustCron(t, expr)
		f := strings.Fields(expr)
		after := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.IntN(365*24*60)) * time.Minute)
		got, ok := c.Next(after, time.UTC)
		// Scan up to 5 years.
		want := time.Time{}
		for x := after.Add(time.Minute); x.Before(after.AddDate(5, 0, 0)); x = x.Add(time.Minute) {
			if !inField(f[3], int(x.Month()), 1, 12) {
				x = time.Date(x.Year(), x.Month()+1, 1, 0, 0, 0, 0, time.UTC).Add(-time.Minute)
				continue
			}
			domOK, dowOK := inField(f[2], x.Day(), 1, 31), inField(f[4], int(x.Weekday()), 0, 6)
			dayOK := domOK && dowOK
			if !strings.HasPrefix(f[2], "*") && !strings.HasPrefix(f[4], "*") {
				dayOK = domOK || dowOK
			}
			if !dayOK {
				x = time.Date(x.Year(), x.Month(), x.Day()+1, 0, 0, 0, 0, time.UTC).Add(-time.Minute)
				continue
			}
			if inField(f[1], x.Hour(), 0, 23) && inField(f[0], x.Minute(), 0, 59) {
				want = x
				break
			}
		}
		if ok != !want.IsZero() || (ok && !got.Equal(want)) {
			t.Fatalf("%q after %v: got %v %v, want %v", expr, after, got, ok, want)
		}
	}
}

func TestNewAndLimits(t *testing.T) {
	ny := zone(t, "America/New_York")
	first := at(t, ny, "2026-03-02 10:00")
	r, err := New("", "0 10 * * mon", 3, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	prev := first
	var got []time.Time
	for n := 1; ; n++ {
		next, ok := r.Next(first, prev, n, ny)
		if !ok {
			break
		}
		got = append(got, next)
		prev = next
	}
	if len(got) != 2 { // count 3: the first and two more
		t.Errorf("count 3 gave %d more occurrences", len(got))
	}
	r, _ = New("1d", "", 0, at(t, ny, "2026-03-05 10:00"))
	if next, ok := r.Next(first, at(t, ny, "2026-03-04 10:00"), 3, ny); !ok || !next.Equal(at(t, ny, "2026-03-05 10:00")) {
		t.Errorf("until includes its instant: %v %v", next, ok)
	}
	if _, ok := r.Next(first, at(t, ny, "2026-03-05 10:00"), 4, ny); ok {
		t.Error("an occurrence after until")
	}
	r, _ = New("2w", "", 0, time.Time{})
	if r.Days != 14 {
		t.Errorf("2w = %d days", r.Days)
	}
	for _, c := range []struct {
		every, cron string
		count       int
		want        string
	}{
		{"", "", 0, "every: give every"},
		{"1d", "0 * * * *", 0, "cron: give every or cron, not both"},
		{"30s", "", 0, `every: "30s" is not a period`},
		{"soon", "", 0, `every: "soon" is not a period`},
		{"0d", "", 0, `every: "0d" is out of range`},
		{"", "0 25 * * *", 0, `cron: cron "0 25 * * *": field 2 (hour)`},
		{"1h", "", -1, "count: -1 is out of range"},
	} {
		_, err := New(c.every, c.cron, c.count, time.Time{})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%q, %q, %d): %v, want %q", c.every, c.cron, c.count, err, c.want)
		}
	}
}

// A daily series at 02:30 keeps 02:30: the spring-forward day fires at
// 03:00 (the end of the gap) and the next day at 02:30 again.
func TestDailySeriesThroughAGap(t *testing.T) {
	ny := zone(t, "America/New_York")
	r, _ := New("1d", "", 0, time.Time{})
	first := at(t, ny, "2026-03-06 02:30")
	prev := first
	var got []string
	for n := 1; n <= 3; n++ {
		next, _ := r.Next(first, prev, n, ny)
		got = append(got, next.In(ny).Format(time.RFC3339))
		prev = next
	}
	want := []string{"2026-03-07T02:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v", got, want)
	}
}

func BenchmarkCronNext(b *testing.B) {
	ny := zone(b, "America/New_York")
	c := mustCron(b, "0 10 * * mon")
	t0 := at(b, ny, "2026-03-02 10:00")
	for b.Loop() {
		if _, ok := c.Next(t0, ny); !ok {
			b.Fatal("none")
		}
	}
}
