package codec

import (
	"testing"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"
)

// Every codec, on any bytes: Decode never fails and never panics; what it
// decodes encodes again to a message that decodes equal.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Add([]byte{0x0a, 0x02, 'u', '1', 0x12, 0x00})
	codecs := []goka.Codec{Command{}, UserState{}, Tick{}, Wake{}, IVRCall{}, CallResult{}, ScheduleEvent{}, DialerState{}, CallStatus{}, DeadLetter{}}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range codecs {
			v, err := c.Decode(data)
			if err != nil {
				t.Fatalf("%T.Decode: %v", c, err)
			}
			if u, ok := v.(*Undecodable); ok {
				if string(u.Data) != string(data) || u.Err == nil {
					t.Fatalf("%T: undecodable without its bytes or error", c)
				}
				continue
			}
			b, err := c.Encode(v)
			if err != nil {
				t.Fatalf("%T.Encode of a decoded value: %v", c, err)
			}
			again, _ := c.Decode(b)
			if !proto.Equal(v.(proto.Message), again.(proto.Message)) {
				t.Fatalf("%T: round trip changed the message", c)
			}
		}
	})
}
