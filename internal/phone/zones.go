package phone

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ErrNoZone means a recipient has no time zone: the user gave none and the
// numbering plan maps the number to none. The caller dead-letters such a
// follow-up or asks for a zone; it never falls back to UTC.
var ErrNoZone = errors.New("no time zone for the recipient")

// ErrUnknownZone means a zone name is not in the IANA database.
var ErrUnknownZone = errors.New("unknown time zone")

var zoneCache sync.Map // name → *time.Location or error

// LoadZone is time.LoadLocation, cached, and refusing "" and "Local",
// which would stand for UTC or for the machine's own zone.
func LoadZone(name string) (*time.Location, error) {
	if v, ok := zoneCache.Load(name); ok {
		if err, bad := v.(error); bad {
			return nil, err
		}
		return v.(*time.Location), nil
	}
	var v any
	switch loc, err := time.LoadLocation(name); {
	case name == "" || name == "Local":
		v = fmt.Errorf("%w %q: give an IANA name such as Europe/Berlin", ErrUnknownZone, name)
	case err != nil:
		v = fmt.Errorf("%w %q: %v", ErrUnknownZone, name, err)
	default:
		v = loc
	}
	zoneCache.Store(name, v)
	if err, bad := v.(error); bad {
		return nil, err
	}
	return v.(*time.Location), nil
}

// zoneOverrides correct the numbering data where it gives a whole region
// the zone of another country, whose rules differ (found by comparing,
// for every prefix of the data, the UTC offsets of its zones with those of
// the region's IANA zones across a year). Each entry makes calls ring an
// hour early or late for part of the year; TestZoneOverridesAreStillNeeded
// fails when the data is fixed. Put a longer prefix before a shorter one
// that starts it.
var zoneOverrides = []struct{ prefix, zone string }{
	// Kaliningrad (+7 401): UTC+2 all year; the data's Europe/Bucharest
	// observes DST, an hour early in summer.
	{"+740", "Europe/Kaliningrad"},
	// South Sudan: UTC+2 since 2021; the data's Africa/Nairobi is UTC+3,
	// an hour early all year.
	{"+211", "Africa/Juba"},
	// Morocco and Western Sahara: UTC+1, UTC+0 in Ramadan; the data's
	// Atlantic/Canary is UTC+0 in winter, an hour late.
	{"+212", "Africa/Casablanca"},
	// Algeria: UTC+1 all year; the data's Europe/Paris observes DST, an
	// hour early in summer.
	{"+213", "Africa/Algiers"},
	// Libya: UTC+2 all year; the data's Europe/Bucharest observes DST, an
	// hour early in summer.
	{"+218", "Africa/Tripoli"},
	// Nicaragua: UTC-6 all year; the data's America/Chicago observes DST,
	// an hour early in summer.
	{"+505", "America/Managua"},
}

// overriddenZone is the zone zoneOverrides give a number, if any.
func overriddenZone(e164 string) (string, bool) {
	for _, o := range zoneOverrides {
		if strings.HasPrefix(e164, o.prefix) {
			return o.zone, true
		}
	}
	return "", false
}

var zoneSets sync.Map // names joined by "," → []*time.Location

// Zones is where a call to a recipient must fall inside the calling
// windows: the user's own IANA zone tz when it is given, else every zone
// the numbering plan gives for the number (corrected by zoneOverrides,
// also for a number stored with the data's zones). A number without zones
// and no tz is ErrNoZone. The slice is shared: do not modify it.
func Zones(tz string, n Number) ([]*time.Location, error) {
	if tz == "" {
		tz, _ = overriddenZone(n.E164)
	}
	if tz != "" {
		loc, err := LoadZone(tz)
		if err != nil {
			return nil, err
		}
		return []*time.Location{loc}, nil
	}
	if len(n.Zones) == 0 {
		return nil, fmt.Errorf("%w: the user gave none and the numbering plan has none for %s (region %s)", ErrNoZone, n.E164, n.Region)
	}
	key := strings.Join(n.Zones, ",")
	if v, ok := zoneSets.Load(key); ok {
		return v.([]*time.Location), nil
	}
	locs := make([]*time.Location, 0, len(n.Zones))
	for _, name := range n.Zones {
		loc, err := LoadZone(name)
		if err != nil {
			return nil, fmt.Errorf("zones of %s: %w", n.E164, err)
		}
		locs = append(locs, loc)
	}
	zoneSets.Store(key, locs)
	return locs, nil
}
