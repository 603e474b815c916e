package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// An optional allowlist of destination countries: a number of another
// region, or a non-geographic one, gets no call, whatever the time.
func TestCountriesAllowlist(t *testing.T) {
	p := mustParse(t, "countries: [US, DE, US]\ndefault: {}\n")
	if !slices.Equal(p.Countries, []string{"DE", "US"}) {
		t.Fatalf("countries %v", p.Countries)
	}
	berlin := zone(t, "Europe/Berlin")
	due := at(t, berlin, "2026-06-03 10:00")
	for _, region := range []string{"DE", "US"} {
		if r, err := p.Effective(Request{Due: due, Zones: []*time.Location{berlin}, Region: region}); err != nil || !r.At.Equal(due) {
			t.Errorf("region %s: %v %v", region, r, err)
		}
	}
	for _, region := range []string{"GB", "001", ""} {
		_, err := p.Effective(Request{Due: due, Zones: []*time.Location{berlin}, Region: region})
		if !errors.Is(err, ErrCountry) || !errors.Is(err, ErrNoOpening) {
			t.Errorf("region %q: %v, want ErrCountry (an ErrNoOpening)", region, err)
		}
	}
	// The encoding keeps the list and reads back to the same version; a
	// policy without one keeps the version it had before countries existed.
	back, err := Decode(p.Encode())
	if err != nil || back.Version() != p.Version() || !slices.Equal(back.Countries, p.Countries) {
		t.Fatalf("round trip: %v, %v", back, err)
	}
	if strings.Contains(string(Default().Encode()), "countries") || Default().Version() == p.Version() {
		t.Fatalf("default encodes %s", Default().Encode())
	}
	if r, err := Default().Effective(Request{Due: due, Zones: []*time.Location{berlin}, Region: "GB"}); err != nil || !r.At.Equal(due) {
		t.Fatalf("no allowlist: %v %v", r, err)
	}
	for doc, want := range map[string]string{
		"countries: []":   "countries (line 1): is empty",
		"countries: [us]": `countries[0] (line 1): "us" is not a region`,
		"countries: DE":   "countries (line 1): must be a list",
	} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", doc, err, want)
		}
	}
}
