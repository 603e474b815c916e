package phone

import (
	"slices"
	"testing"
	"time"

	"github.com/nyaruka/phonenumbers"
)

// The numbering data gives some whole regions a zone of another country
// with other rules: Kaliningrad (+7 401) Europe/Bucharest, which observes
// DST (a call allowed at 09:00 rings at 08:00 local in summer); Morocco
// Atlantic/Canary (an hour late in winter). Parse gives the region's own
// zone, and so does Zones for a number stored with the data's zone.
func TestZoneOverrides(t *testing.T) {
	cases := []struct{ number, zone string }{
		{"+74012345678", "Europe/Kaliningrad"},
		{"+212522123456", "Africa/Casablanca"},
		{"+21321123456", "Africa/Algiers"},
		{"+218212345678", "Africa/Tripoli"},
		{"+50522123456", "America/Managua"},
		{"+211912345678", "Africa/Juba"},
	}
	for _, c := range cases {
		n, err := Parse(c.number)
		if err != nil {
			t.Fatalf("Parse(%s): %v", c.number, err)
		}
		if !slices.Equal(n.Zones, []string{c.zone}) {
			t.Errorf("Parse(%s) zones %v, want %s", c.number, n.Zones, c.zone)
		}
		stored := Number{E164: c.number, Region: n.Region, Zones: data(t, c.number)}
		locs, err := Zones("", stored)
		if err != nil || len(locs) != 1 || locs[0].String() != c.zone {
			t.Errorf("Zones of %s stored with %v: %v %v, want %s", c.number, stored.Zones, locs, err, c.zone)
		}
		if locs, err := Zones("Asia/Tokyo", stored); err != nil || locs[0].String() != "Asia/Tokyo" {
			t.Errorf("the user's own zone is overridden: %v %v", locs, err)
		}
	}
	// Numbers of other prefixes keep the data's zones.
	for number, zone := range map[string]string{"+74951234567": "Europe/Moscow", "+4930123456": "Europe/Berlin", "+34912345678": "Europe/Madrid"} {
		if n, err := Parse(number); err != nil || !slices.Equal(n.Zones, []string{zone}) {
			t.Errorf("Parse(%s): %v %v, want %s", number, n.Zones, err, zone)
		}
	}
}

// Each override still corrects the numbering data: the data's zone keeps
// another UTC offset than the override's on some day of 2026. When an
// upgrade of the data fixes a prefix, this fails: drop its entry.
func TestZoneOverridesAreStillNeeded(t *testing.T) {
	for _, o := range zoneOverrides {
		want, err := LoadZone(o.zone)
		if err != nil {
			t.Fatalf("override %s: %v", o.prefix, err)
		}
		for _, name := range data(t, o.prefix) {
			got, err := LoadZone(name)
			if err != nil {
				t.Fatal(err)
			}
			if !differ(got, want) {
				t.Errorf("prefix %s: the numbering data's %s keeps the offsets of %s all year: drop the override", o.prefix, name, o.zone)
			}
		}
	}
}

// data are the numbering data's zones for a number or prefix.
func data(t *testing.T, number string) []string {
	t.Helper()
	zs, err := phonenumbers.GetTimezonesForPrefix(number)
	if err != nil {
		t.Fatal(err)
	}
	return zs
}

func differ(a, b *time.Location) bool {
	for d := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC); d.Year() == 2026; d = d.AddDate(0, 0, 7) {
		_, x := d.In(a).Zone()
		_, y := d.In(b).Zone()
		if x != y {
			return true
		}
	}
	return false
}
