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

var zoneSets sync.Map // names joined by "," → []*time.Location

// Zones is where a call to a recipient must fall inside the calling
// windows: the user's own IANA zone tz when it is given, else every zone
// the numbering plan gives for the number. A number without zones and no
// tz is ErrNoZone. The slice is shared: do not modify it.
func Zones(tz string, n Number) ([]*time.Location, error) {
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
