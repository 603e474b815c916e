package dialer

import (
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/phone"
)

// recipientZone is the IANA time zone of a call's recipient, recorded with
// the call (DialRecord.recipient_zone) and published with its results for
// the answer rate by local hour: the user's own zone, else the number's
// when the numbering plan gives it one zone only (a number spanning zones
// tells no local hour); empty otherwise.
func recipientZone(c *pb.IVRCall) string {
	if tz := c.GetTimeZone(); tz != "" {
		if _, err := phone.LoadZone(tz); err == nil && len(tz) <= maxZoneName {
			return tz
		}
		return ""
	}
	n, err := phone.Parse(c.GetPhone())
	if err != nil {
		return ""
	}
	zones, err := phone.Zones("", n)
	if err != nil || len(zones) != 1 {
		return ""
	}
	return zones[0].String()
}

// maxZoneName is the longest zone name recorded (IANA's longest is 32).
const maxZoneName = 64
