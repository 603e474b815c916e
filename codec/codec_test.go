package codec

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

func TestRoundTrip(t *testing.T) {
	in := &pb.Command{UserId: "u1", Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
		Phone: "+14155550123", TimeZone: "America/New_York", OnboardedAt: timestamppb.New(time.Unix(1700000000, 5)),
		FollowUps: []*pb.FollowUp{{TaskId: "t1", When: &pb.FollowUp_Delay{Delay: durationpb.New(time.Hour)}, Action: &pb.Action{IvrScript: "welcome"}, Payload: []byte{1, 2}}},
	}}}
	var c Command
	b, err := c.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, out.(*pb.Command)) {
		t.Fatalf("round trip: got %v, want %v", out, in)
	}
}

func TestDecodeGarbageYieldsUndecodable(t *testing.T) {
	var c UserState
	garbage := []byte{0xff, 0xff, 0xff}
	v, err := c.Decode(garbage)
	if err != nil {
		t.Fatalf("decode must not fail, got %v", err)
	}
	u, ok := v.(*Undecodable)
	if !ok || u.Err == nil || string(u.Data) != string(garbage) {
		t.Fatalf("got %#v, want *Undecodable with the bytes", v)
	}
	b, err := c.Encode(u)
	if err != nil || string(b) != string(garbage) {
		t.Fatalf("re-encoding an Undecodable: %v %v", b, err)
	}
}

func TestEncodeWrongType(t *testing.T) {
	var c IVRCall
	if _, err := c.Encode(&pb.Tick{}); !errors.Is(err, ErrWrongType) {
		t.Fatalf("got %v, want ErrWrongType", err)
	}
}
