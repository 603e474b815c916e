package phone

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseValid(t *testing.T) {
	cases := []struct {
		in, region string
		zones      []string
	}{
		{"+14155550142", "US", []string{"America/Los_Angeles"}},
		{"+12125551234", "US", []string{"America/New_York"}},
		{"+18085551234", "US", []string{"Pacific/Honolulu"}},
		{"+17875551234", "PR", []string{"America/Puerto_Rico"}},
		{"+4930123456", "DE", []string{"Europe/Berlin"}},
		{"+4915112345678", "DE", []string{"Europe/Berlin"}},
		{"+61491570156", "AU", []string{"Australia/Sydney"}},
		{"+919876543210", "IN", []string{"Asia/Calcutta"}},
		{"+80012345678", "001", nil}, // international freephone: no zone
	}
	for _, c := range cases {
		n, err := Parse(c.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if n.E164 != c.in || n.Region != c.region || strings.Join(n.Zones, ",") != strings.Join(c.zones, ",") {
			t.Errorf("Parse(%q) = %+v, want region %s zones %v", c.in, n, c.region, c.zones)
		}
	}
}

// A US toll-free number has no area: the plan gives every zone of +1.
func TestParseTollFreeSpansZones(t *testing.T) {
	n, err := Parse("+18005551234")
	if err != nil {
		t.Fatal(err)
	}
	if n.Region != "US" || len(n.Zones) < 10 {
		t.Fatalf("got %+v, want region US and the zones of +1", n)
	}
	for _, want := range []string{"America/New_York", "America/Los_Angeles", "Pacific/Honolulu"} {
		if !strings.Contains(strings.Join(n.Zones, ","), want) {
			t.Errorf("zones lack %s: %v", want, n.Zones)
		}
	}
}

func TestParseInvalid(t *testing.T) {
	cases := []struct{ in, reason string }{
		{"", "empty"},
		{"14155550142", "not in E.164 form"},
		{"+1 415 555 0142", "not in E.164 form"},
		{"+1-415-555-0142", "not in E.164 form"},
		{"+", "not in E.164 form"},
		{"+0123456", "no country code starts with 0"},
		{"+1234567890123456", "at most 15"},
		{"+999123456", "calling code"},
		{"+1415555014", "too short for country code +1"},
		{"+141555501423", "too long for country code +1"},
		{"+15555550100", "not a number of the numbering plan"},
		{"+49030123456", "write +4930123456"},
		{"+12", "too short"},
	}
	for _, c := range cases {
		_, err := Parse(c.in)
		var inv *InvalidError
		if !errors.As(err, &inv) || !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q): %v, want an *InvalidError", c.in, err)
			continue
		}
		if !strings.Contains(inv.Reason, c.reason) {
			t.Errorf("Parse(%q) reason %q, want it to say %q", c.in, inv.Reason, c.reason)
		}
	}
}

func TestZones(t *testing.T) {
	us, _ := Parse("+14155550142")
	free, _ := Parse("+80012345678")
	tollFree, _ := Parse("+18005551234")

	got, err := Zones("Europe/Berlin", us) // the user's zone wins
	if err != nil || len(got) != 1 || got[0].String() != "Europe/Berlin" {
		t.Errorf("user zone: %v %v", got, err)
	}
	got, err = Zones("", us)
	if err != nil || len(got) != 1 || got[0].String() != "America/Los_Angeles" {
		t.Errorf("number zone: %v %v", got, err)
	}
	got, err = Zones("", tollFree)
	if err != nil || len(got) != len(tollFree.Zones) {
		t.Errorf("toll-free zones: %d %v", len(got), err)
	}
	if _, err := Zones("", free); !errors.Is(err, ErrNoZone) {
		t.Errorf("non-geographic number without a zone: %v, want ErrNoZone", err)
	}
	for _, bad := range []string{"Mars/Olympus", "Local"} {
		if _, err := Zones(bad, us); !errors.Is(err, ErrUnknownZone) {
			t.Errorf("zone %q: %v, want ErrUnknownZone", bad, err)
		}
	}
	if _, err := Zones("", Number{E164: "+1", Region: "US"}); !errors.Is(err, ErrNoZone) {
		t.Errorf("no zones: %v", err)
	}
}

// Parse is cached; a cached answer equals a fresh one.
func TestParseCached(t *testing.T) {
	a, err1 := Parse("+4930123456")
	b, err2 := Parse("+4930123456")
	if err1 != nil || err2 != nil || a.E164 != b.E164 || a.Region != b.Region {
		t.Fatalf("%+v %v / %+v %v", a, err1, b, err2)
	}
	c, err := parse("+4930123456")
	if err != nil || c.Region != a.Region || strings.Join(c.Zones, ",") != strings.Join(a.Zones, ",") {
		t.Fatalf("fresh %+v %v", c, err)
	}
}

func BenchmarkParseUncached(b *testing.B) {
	for b.Loop() {
		if _, err := parse("+14155550142"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseCached(b *testing.B) {
	for b.Loop() {
		if _, err := Parse("+14155550142"); err != nil {
			b.Fatal(err)
		}
	}
}

func ExampleParse() {
	n, err := Parse("+4930123456")
	fmt.Println(n.Region, n.Zones, err)
	_, err = Parse("+15555550100")
	fmt.Println(err)
	// Output:
	// DE [Europe/Berlin] <nil>
	// phone "+15555550100": not a number of the numbering plan of country code +1 (no such area code or number range)
}

// Numbers charged to the caller, or routed to anyone who rents them, are
// no destination for an automated call: premium-rate, shared-cost,
// personal (+44 70) and UAN numbers.
func TestParseRefusesCostlyNumberTypes(t *testing.T) {
	for in, reason := range map[string]string{
		"+19005550199":   "premium-rate",
		"+448712345678":  "premium-rate",
		"+33891123456":   "premium-rate",
		"+4918012345678": "shared-cost",
		"+447011111111":  "personal",
		"+445512345678":  "UAN",
		"+443001234567":  "UAN",
	} {
		_, err := Parse(in)
		var inv *InvalidError
		if !errors.As(err, &inv) || !strings.Contains(inv.Reason, reason) {
			t.Errorf("Parse(%q): %v, want an *InvalidError that says %s", in, err, reason)
		}
	}
	for _, in := range []string{"+14155550142", "+4915112345678", "+18005551234", "+447400123456"} {
		if _, err := Parse(in); err != nil {
			t.Errorf("Parse(%q): %v", in, err)
		}
	}
}
