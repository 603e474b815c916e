package policy_test

import (
	"fmt"
	"time"

	"github.com/ivrsched/ivrsched/internal/phone"
	"github.com/ivrsched/ivrsched/internal/policy"
)

// The scheduler's path: the number gives the region and, without a zone
// from the user, the zones; the policy gives the effective time.
func ExamplePolicy_Effective() {
	p, err := policy.Parse([]byte(`
default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "08:00", to: "21:00"}]
  blackouts: [{name: new-year, from: 2027-01-01, regions: [US]}]
`))
	if err != nil {
		panic(err)
	}
	n, err := phone.Parse("+14155550142") // invalid: dead-letter as invalid_phone
	if err != nil {
		panic(err)
	}
	zones, err := phone.Zones("", n) // no zone: dead-letter, never UTC
	if err != nil {
		panic(err)
	}
	la := zones[0]
	due := time.Date(2026, 12, 31, 23, 0, 0, 0, la).Add(time.Hour) // onboarded 23:00, 1 h delay
	res, err := p.Effective(policy.Request{Due: due, Zones: zones, Region: n.Region, CallID: "c1"})
	if err != nil {
		panic(err)
	}
	fmt.Println(zones, res.At.In(la).Format(time.DateTime), res.Reason, res.Blackout)
	// Output: [America/Los_Angeles] 2027-01-02 08:00:00 blackout new-year
}

func ExampleParse() {
	_, err := policy.Parse([]byte(`
default:
  open_hours: [{days: [mon-fri], from: "9:00", to: "17:00"}]
  cap: {calls: 2, per: 1 day}
`))
	fmt.Println(err)
	// Output:
	// invalid policy, 3 problems:
	//   default.open_hours[0].days[0] (line 3): "mon-fri" is not a day; accepted: mon, tue, wed, thu, fri, sat, sun
	//   default.open_hours[0].from (line 3): "9:00" is not a time; accepted: "HH:MM", 24-hour, 00:00 to 23:59 (24:00 as an end)
	//   default.cap.per (line 4): "1 day" is not a duration; accepted: a duration such as 10m, 1h30m, 24h or 7d (d = 24h), in whole seconds
}
