package redact

import (
	"testing"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

func TestPhoneAndText(t *testing.T) {
	cases := map[string]string{
		"+14155550123":                         "+•••••••••23",
		"":                                     "",
		`"+4930901820" is not a valid number`:  `"+••••••••20" is not a valid number`,
		"phone 12345 is too short (5 digits)":  "phone 12345 is too short (5 digits)",
		"call +1 (415) 555-0123 at 2026-12-01": "call +• (•••) •••-••23 at 2026-12-01",
		`phone "+15553": too short for country code +1`: `phone "+•••53": too short for country code +1`,
		"country code +999 is not assigned":             "country code +999 is not assigned",
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

// Phones masks a user's phone and the phones of the calls in a dialer's
// value, and leaves the message it was given as it was.
func TestPhonesMasksEveryPhoneField(t *testing.T) {
	st := &pb.UserState{UserId: "u1", Phone: "+14155550123"}
	ds := &pb.DialerState{InFlight: []*pb.IVRCall{{UserId: "u1", Phone: "+14155550123"}}}
	if got := Phones(st).(*pb.UserState); got.GetPhone() != "+•••••••••23" || got.GetUserId() != "u1" {
		t.Errorf("user state: %v", got)
	}
	if got := Phones(ds).(*pb.DialerState); got.GetInFlight()[0].GetPhone() != "+•••••••••23" {
		t.Errorf("dialer state: %v", got)
	}
	if st.GetPhone() != "+14155550123" || ds.GetInFlight()[0].GetPhone() != "+14155550123" {
		t.Error("the original changed")
	}
}
