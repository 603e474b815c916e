package redact

import "testing"

func TestPhoneAndText(t *testing.T) {
	cases := map[string]string{
		"+14155550123":                         "+•••••••••23",
		"":                                     "",
		`"+4930901820" is not a valid number`:  `"+••••••••20" is not a valid number`,
		"phone 12345 is too short (5 digits)":  "phone 12345 is too short (5 digits)",
		"call +1 (415) 555-0123 at 2026-12-01": "call +• (•••) •••-••23 at 2026-12-01",
	}
	for in, want := range cases {
		got := Text(in)
		if in == "+14155550123" || in == "" {
			got = Phone(in)
		}
		if got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}
