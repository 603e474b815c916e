package calendar

import (
	"testing"
	"time"
)

func load(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("zone %s: %v", name, err)
	}
	return loc
}

func hm(h, m int) int { return h*3600 + m*60 }

// TestAt covers ordinary times, the spring-forward gap (first instant after
// it) and the fall-back repeat (first occurrence) in four zones, among them
// Lord Howe's 30-minute DST and Kolkata without DST.
func TestAt(t *testing.T) {
	cases := []struct {
		zone string
		date Date
		sec  int
		want string // RFC 3339 with the zone's offset
	}{
		// New York: spring forward 2026-03-08 02:00 EST -> 03:00 EDT.
		{"America/New_York", Date{2026, 3, 8}, hm(1, 59), "2026-03-08T01:59:00-05:00"},
		{"America/New_York", Date{2026, 3, 8}, hm(2, 0), "2026-03-08T03:00:00-04:00"},
		{"America/New_York", Date{2026, 3, 8}, hm(2, 30), "2026-03-08T03:00:00-04:00"},
		{"America/New_York", Date{2026, 3, 8}, hm(3, 0), "2026-03-08T03:00:00-04:00"},
		{"America/New_York", Date{2026, 3, 8}, hm(3, 30), "2026-03-08T03:30:00-04:00"},
		// Fall back 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 is the EDT one.
		{"America/New_York", Date{2026, 11, 1}, hm(1, 0), "2026-11-01T01:00:00-04:00"},
		{"America/New_York", Date{2026, 11, 1}, hm(1, 30), "2026-11-01T01:30:00-04:00"},
		{"America/New_York", Date{2026, 11, 1}, hm(2, 0), "2026-11-01T02:00:00-05:00"},
		// Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
		{"Europe/Berlin", Date{2026, 3, 29}, hm(2, 30), "2026-03-29T03:00:00+02:00"},
		{"Europe/Berlin", Date{2026, 10, 25}, hm(2, 30), "2026-10-25T02:30:00+02:00"},
		{"Europe/Berlin", Date{2026, 10, 25}, hm(3, 0), "2026-10-25T03:00:00+01:00"},
		// Lord Howe: 30-minute DST. 2026-10-04 02:00 +10:30 -> 02:30 +11;
		// 2026-04-05 02:00 +11 -> 01:30 +10:30.
		{"Australia/Lord_Howe", Date{2026, 10, 4}, hm(2, 0), "2026-10-04T02:30:00+11:00"},
		{"Australia/Lord_Howe", Date{2026, 10, 4}, hm(2, 15), "2026-10-04T02:30:00+11:00"},
		{"Australia/Lord_Howe", Date{2026, 10, 4}, hm(2, 30), "2026-10-04T02:30:00+11:00"},
		{"Australia/Lord_Howe", Date{2026, 4, 5}, hm(1, 45), "2026-04-05T01:45:00+11:00"},
		{"Australia/Lord_Howe", Date{2026, 4, 5}, hm(2, 0), "2026-04-05T02:00:00+10:30"},
		// Kolkata: no DST, +05:30 all year.
		{"Asia/Kolkata", Date{2026, 3, 8}, hm(2, 30), "2026-03-08T02:30:00+05:30"},
		{"Asia/Kolkata", Date{2026, 11, 1}, hm(1, 30), "2026-11-01T01:30:00+05:30"},
		// 24:00 is the next day's midnight.
		{"Europe/Berlin", Date{2026, 12, 31}, 86400, "2027-01-01T00:00:00+01:00"},
	}
	for _, c := range cases {
		loc := load(t, c.zone)
		got := At(c.date, c.sec, loc).In(loc).Format(time.RFC3339)
		if got != c.want {
			t.Errorf("%s %s +%ds: got %s, want %s", c.zone, c.date, c.sec, got, c.want)
		}
	}
}

// TestAtIsFirstValidWallTime checks the rule against a brute-force scan:
// on every day of 2026 whose UTC offset changes, and on the days either side,
// At gives, for every quarter hour, the first instant (to the minute) whose
// wall clock reads that time or later.
func TestAtIsFirstValidWallTime(t *testing.T) {
	for _, zone := range []string{"America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata"} {
		loc := load(t, zone)
		checked := 0
		for day := range 366 {
			d := Date{2026, 1, 1}.AddDays(day)
			_, o1 := time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, loc).Zone()
			n := d.AddDays(1)
			_, o2 := time.Date(n.Year, n.Month, n.Day, 23, 0, 0, 0, loc).Zone()
			if o1 == o2 && day%60 != 0 {
				continue
			}
			checked++
			for sec := 0; sec < 86400; sec += 900 {
				got := At(d, sec, loc)
				w := time.Date(d.Year, d.Month, d.Day, 0, 0, sec, 0, time.UTC)
				x := w.Add(-15 * time.Hour)
				for wall(x, loc).Before(w) {
					x = x.Add(time.Minute)
				}
				if !got.Equal(x) {
					t.Fatalf("%s %s +%ds: At gives %v, the first instant reading it is %v", zone, d, sec, got.In(loc), x.In(loc))
				}
			}
		}
		if checked < 6 {
			t.Errorf("%s: only %d days checked", zone, checked)
		}
	}
}

func TestDate(t *testing.T) {
	d, err := ParseDate("2028-02-28")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.AddDays(1).String(); got != "2028-02-29" {
		t.Errorf("leap day: %s", got)
	}
	if got := d.AddDays(2).String(); got != "2028-03-01" {
		t.Errorf("after leap day: %s", got)
	}
	if d.Weekday() != time.Monday {
		t.Errorf("2028-02-28 is a Monday, got %v", d.Weekday())
	}
	if d.Compare(d.AddDays(1)) != -1 || d.AddDays(1).Compare(d) != 1 || d.Compare(d) != 0 {
		t.Error("Compare")
	}
	for _, bad := range []string{"2027-13-01", "2027-1-1", "27-01-01", "2027-02-30", ""} {
		if _, err := ParseDate(bad); err == nil {
			t.Errorf("ParseDate(%q) accepted", bad)
		}
	}
}

// Weekday and AddDays agree with the time package over four centuries of days.
func TestDateArithmetic(t *testing.T) {
	d := Date{1900, 1, 1}
	for i := range 146097 {
		want := time.Date(1900, 1, 1+i, 12, 0, 0, 0, time.UTC)
		if d != (Date{want.Year(), want.Month(), want.Day()}) || d.Weekday() != want.Weekday() {
			t.Fatalf("day %d: %s %v, want %s %v", i, d, d.Weekday(), want.Format(time.DateOnly), want.Weekday())
		}
		d = d.AddDays(1)
	}
}
