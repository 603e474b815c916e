package ivrsched

import (
	"testing"
	"time"
)

// At every hour of the day DaytimeZone names a zone that loads and where it
// is between 10:00 and 14:00.
func TestDaytimeZone(t *testing.T) {
	for _, day := range []time.Time{time.Date(2026, 1, 15, 0, 30, 0, 0, time.UTC), time.Date(2026, 7, 15, 0, 30, 0, 0, time.UTC)} {
		for h := range 24 {
			now := day.Add(time.Duration(h) * time.Hour)
			name := DaytimeZone(now)
			loc, err := time.LoadLocation(name)
			if err != nil {
				t.Fatalf("%v: %s: %v", now, name, err)
			}
			if local := now.In(loc).Hour(); local < 10 || local > 14 {
				t.Fatalf("%v: %s is at %02d:30", now, name, local)
			}
		}
	}
}
