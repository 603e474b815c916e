package codec

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// Encoded is a message already encoded: the Proto codecs write its bytes
// as they are. A processor encodes a table value itself (EncodeBounded) to
// check its size before the write, and passes the bytes to SetValue, so
// the value is encoded once.
type Encoded []byte

// ErrTooLarge is an encoding larger than its bound.
var ErrTooLarge = errors.New("encoded value too large")

// EncodeBounded encodes m, or returns ErrTooLarge if the encoding is
// longer than bound bytes (bound <= 0: no bound).
func EncodeBounded(m proto.Message, bound int) (Encoded, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	if bound > 0 && len(b) > bound {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), bound)
	}
	return b, nil
}

// recordFraming is what a record costs besides its key and value: Sarama
// counts at most 36 bytes per record against Producer.MaxMessageBytes, and
// the broker counts a batch's header (61 bytes) against max.message.bytes.
const recordFraming = 128

// ValueBound is the largest value a producer with Producer.MaxMessageBytes
// maxMessageBytes writes in one record keyed by up to maxKey bytes, without
// headers.
func ValueBound(maxMessageBytes, maxKey int) int {
	return maxMessageBytes - maxKey - recordFraming
}
