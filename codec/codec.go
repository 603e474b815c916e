// Package codec holds the wire contract (ivrsched.proto, generated into
// ivrschedpb) and one Goka codec per message type.
//
// Decoding never fails: bytes that are not a valid message decode to
// *Undecodable, so a poison record reaches the callback, which routes it aside
// instead of stopping the processor.
package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// ErrWrongType is returned when a codec is asked to encode a value of another type.
var ErrWrongType = errors.New("codec: wrong value type")

// Undecodable is what a codec yields for bytes that are not a valid message.
type Undecodable struct {
	Data []byte
	Err  error
}

// GetData returns the bytes, or nil for a nil *Undecodable.
func (u *Undecodable) GetData() []byte {
	if u == nil {
		return nil
	}
	return u.Data
}

func (u *Undecodable) Error() string {
	return fmt.Sprintf("undecodable %d bytes: %v", len(u.Data), u.Err)
}

// Proto is a Goka codec for the protobuf message type *T.
type Proto[T any, PT interface {
	*T
	proto.Message
}] struct{}

// Encode marshals a *T. An *Undecodable encodes to its original bytes, so a
// poison record can be forwarded unchanged, and Encoded to its bytes.
func (Proto[T, PT]) Encode(value any) ([]byte, error) {
	switch v := value.(type) {
	case *Undecodable:
		return v.Data, nil
	case Encoded:
		return v, nil
	}
	m, ok := value.(PT)
	if !ok {
		return nil, fmt.Errorf("%w: got %T, want %T", ErrWrongType, value, PT(nil))
	}
	return proto.Marshal(m)
}

// Decode unmarshals into a new *T, or returns *Undecodable (and no error).
func (Proto[T, PT]) Decode(data []byte) (any, error) {
	m := PT(new(T))
	if err := proto.Unmarshal(data, m); err != nil {
		return &Undecodable{Data: data, Err: err}, nil
	}
	return m, nil
}

// The codecs, one per type on the wire.
type (
	Command       = Proto[pb.Command, *pb.Command]
	UserState     = Proto[pb.UserState, *pb.UserState]
	Tick          = Proto[pb.Tick, *pb.Tick]
	Wake          = Proto[pb.Wake, *pb.Wake]
	IVRCall       = Proto[pb.IVRCall, *pb.IVRCall]
	CallResult    = Proto[pb.CallResult, *pb.CallResult]
	ScheduleEvent = Proto[pb.ScheduleEvent, *pb.ScheduleEvent]
	DialerState   = Proto[pb.DialerState, *pb.DialerState]
	CallStatus    = Proto[pb.CallStatus, *pb.CallStatus]
	DeadLetter    = Proto[pb.DeadLetter, *pb.DeadLetter]
)

// JSON renders a message as one line of protojson (field names as in the
// .proto), with stable spacing, for the CLI.
func JSON(m proto.Message) string { return render(m, "") }

// IndentedJSON renders a message as indented protojson, for the web UI.
func IndentedJSON(m proto.Message) string { return render(m, "  ") }

func render(m proto.Message, indent string) string {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return fmt.Sprintf("{\"error\":%q}", err.Error())
	}
	// protojson varies its spacing on purpose; normalize it.
	var buf bytes.Buffer
	if indent == "" {
		err = json.Compact(&buf, b)
	} else {
		err = json.Indent(&buf, b, "", indent)
	}
	if err != nil {
		return string(b)
	}
	return buf.String()
}
