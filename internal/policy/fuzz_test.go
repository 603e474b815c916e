package policy

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/calendar"
)

var fuzzZones = []string{
	"America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata",
	"America/Los_Angeles", "Pacific/Honolulu", "America/St_Johns", "Asia/Kathmandu",
}

// FuzzEffective checks Effective against an oracle written from the rules'
// definition, for random policies, zones and due times around DST changes:
// the effective time is never before the due time; it is inside an open
// window and on no blackout date in every zone; it keeps the cap; the same
// request gives the same answer; with neither cap nor spread, no earlier
// quarter hour after the due time was allowed (windows and DST changes fall
// on quarter hours, so the first allowed instant after the due time is one).
func FuzzEffective(f *testing.F) {
	f.Add(int64(0), uint8(1), uint8(0x7f), uint16(8*4), uint16(13*4), uint8(0), uint16(0), uint16(0), int16(0), uint8(0), uint8(0), uint16(0), uint16(0), []byte{})
	f.Add(int64(1_000_000), uint8(3), uint8(0x1f), uint16(9*4), uint16(11*4), uint8(0x60), uint16(10*4), uint16(4*4), int16(2), uint8(3), uint8(2), uint16(24*4), uint16(600), []byte{3, 40, 90})
	f.Add(int64(5_200_000), uint8(4), uint8(0x7f), uint16(2*4+2), uint16(4), uint8(0), uint16(0), uint16(0), int16(-1), uint8(1), uint8(1), uint16(4), uint16(0), []byte{1})
	f.Add(int64(25_000_000), uint8(0x81), uint8(0x41), uint16(0), uint16(96), uint8(0x3e), uint16(22*4), uint16(2*4), int16(0), uint8(0), uint8(0), uint16(0), uint16(3600), []byte{})
	f.Add(int64(57_900_000), uint8(0x22), uint8(0x7f), uint16(1*4+2), uint16(2), uint8(0), uint16(0), uint16(0), int16(5), uint8(10), uint8(2), uint16(48*4), uint16(60), []byte{0, 0, 7})
	zones := make([]*time.Location, len(fuzzZones))
	for i, name := range fuzzZones {
		zones[i] = zone(f, name)
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, dueSec int64, zoneMask, days1 uint8, from1, len1 uint16, days2 uint8, from2, len2 uint16,
		blackStart int16, blackLen uint8, capCalls uint8, capPerQ uint16, spreadSec uint16, recent []byte) {
		// The due time: any second of 2026-2027 (both DST changes of every zone).
		due := base.Add(time.Duration(uint64(dueSec)%(2*365*86400)) * time.Second)
		var zs []*time.Location
		for i := range zones {
			if zoneMask&(1<<i) != 0 {
				zs = append(zs, zones[i])
			}
		}
		if len(zs) == 0 {
			zs = zones[:1]
		}
		rule := func(days uint8, from, length uint16) (OpenHours, bool) {
			f := int(from) % 96 * 900 // quarter hours
			l := (int(length)%96 + 1) * 900
			var ds []time.Weekday
			for _, d := range allDays() {
				if days&(1<<uint(d)) != 0 {
					ds = append(ds, d)
				}
			}
			return OpenHours{Days: ds, From: Clock(f), To: Clock(min(f+l, 86400))}, len(ds) > 0
		}
		var r Rules
		if o, ok := rule(days1, from1, len1); ok {
			r.OpenHours = append(r.OpenHours, o)
		}
		if o, ok := rule(days2, from2, len2); ok {
			r.OpenHours = append(r.OpenHours, o)
		}
		if len(r.OpenHours) == 0 {
			r.OpenHours = DefaultRules().OpenHours
		}
		if blackLen > 0 {
			from := calendar.DateOf(due, time.UTC).AddDays(int(blackStart) % 30)
			b := Blackout{Name: "b", From: from, To: from.AddDays(int(blackLen) % 20)}
			if blackLen%3 == 0 {
				b.Regions = []string{"DE"}
			}
			r.Blackouts = []Blackout{b}
		}
		if capCalls > 0 {
			r.Cap = &Cap{Calls: int(capCalls)%4 + 1, Per: time.Duration(int(capPerQ)%(7*96)+1) * 15 * time.Minute}
		}
		spread := time.Duration(spreadSec) * time.Second % MaxSpread
		r.Spread = &spread
		p, err := build(r, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		rules := p.Default
		var calls []Call
		if len(recent) > 24 {
			recent = recent[:24]
		}
		for i, b := range recent {
			calls = append(calls, Call{ID: string(rune('a' + i)), At: due.Add(time.Duration(int(b)-128) * 20 * time.Minute)})
		}
		req := Request{Due: due, Zones: zs, Region: "US", CallID: "self", Recent: calls}
		if blackLen%2 == 1 {
			req.Region = "DE"
		}

		res, err := p.Effective(req)
		if errors.Is(err, ErrNoOpening) && len(zs) > 1 {
			return // windows of several zones may never overlap
		}
		if err != nil {
			t.Fatalf("Effective: %v", err)
		}
		if res.At.Before(due) {
			t.Fatalf("effective %v before due %v", res.At, due)
		}
		if !oracleOpen(rules, zs, req.Region, res.At) {
			t.Fatalf("effective %v is not open (due %v, zones %v, rules %+v)", res.At, due, zoneNames(zs), rules)
		}
		if rules.Cap.Calls > 0 && !capOracle(res.At, *rules.Cap, calls) {
			t.Fatalf("effective %v breaks the cap %+v of %v", res.At, *rules.Cap, calls)
		}
		if again, err := p.Effective(req); err != nil || !again.At.Equal(res.At) || again.Reason != res.Reason {
			t.Fatalf("not deterministic: %v then %v, %v", res, again, err)
		}
		if (res.Reason == ReasonNone) != res.At.Equal(due) {
			t.Fatalf("reason %v for %v from %v", res.Reason, res.At, due)
		}
		if res.Reason == ReasonWindow || res.Reason == ReasonBlackout {
			if oracleOpen(rules, zs, req.Region, due) {
				t.Fatalf("reason %v but the due time %v is open", res.Reason, due)
			}
		}
		if rules.Cap.Calls == 0 && spread == 0 && res.At.Sub(due) < 8*24*time.Hour {
			for x := due.Truncate(15 * time.Minute).Add(15 * time.Minute); x.Before(res.At); x = x.Add(15 * time.Minute) {
				if oracleOpen(rules, zs, req.Region, x) {
					t.Fatalf("%v is open, before the effective %v (due %v)", x, res.At, due)
				}
			}
		}
	})
}

// oracleOpen tells, from the rules' definition, whether a call may be
// placed at x: in every zone, x's local date is no blackout, and x lies in
// the interval of an open-hours rule of its local date (or of the day
// before), whose bounds are the instants calendar.At gives for them.
func oracleOpen(r Rules, zones []*time.Location, region string, x time.Time) bool {
	blacked := func(d calendar.Date) bool {
		for _, b := range r.Blackouts {
			day := time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, time.UTC)
			from := time.Date(b.From.Year, b.From.Month, b.From.Day, 0, 0, 0, 0, time.UTC)
			to := time.Date(b.To.Year, b.To.Month, b.To.Day, 0, 0, 0, 0, time.UTC)
			if !day.Before(from) && !day.After(to) && (len(b.Regions) == 0 || slices.Contains(b.Regions, region)) {
				return true
			}
		}
		return false
	}
	for _, z := range zones {
		y, m, dd := x.In(z).Date()
		today := calendar.Date{Year: y, Month: m, Day: dd}
		if blacked(today) {
			return false
		}
		open := false
		for _, d := range []calendar.Date{today, today.AddDays(-1)} {
			wd := time.Date(d.Year, d.Month, d.Day, 12, 0, 0, 0, time.UTC).Weekday()
			for _, o := range r.OpenHours {
				if !slices.Contains(o.Days, wd) || blacked(d) {
					continue
				}
				if s, e := calendar.At(d, int(o.From), z), calendar.At(d, int(o.To), z); !x.Before(s) && x.Before(e) {
					open = true
				}
			}
		}
		if !open {
			return false
		}
	}
	return true
}
