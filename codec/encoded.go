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
	b, _, err := EncodeFitting(m, bound, func(int) int { return 0 })
	return b, err
}

// EncodeFitting encodes m within bound bytes (bound <= 0: no bound): while
// the encoding is longer, trim is called with the excess to drop something
// from m, and returns how many items it dropped; once it drops none, the
// error is ErrTooLarge. dropped is how many were dropped in all.
func EncodeFitting(m proto.Message, bound int, trim func(excess int) int) (b Encoded, dropped int, err error) {
	for {
		b, err := proto.Marshal(m)
		if err != nil {
			return nil, dropped, err
		}
		if bound <= 0 || len(b) <= bound {
			return b, dropped, nil
		}
		n := trim(len(b) - bound)
		if n == 0 {
			return nil, dropped, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(b), bound)
		}
		dropped += n
	}
}

// recordFraming is what a record costs besides its key and value: Sarama
// counts at most 36 bytes per record against Producer.MaxMessageBytes, and
// the broker counts a batch's header (61 bytes) against max.message.bytes.
const recordFraming = 128

// MaxIDBytes bounds, in bytes, each id of the contract: a user id (a
// record's key), a task id, a call id and a campaign id. A command that
// names a longer one is dead-lettered (too_long) rather than applied, so a
// record's key, and so the framing of every value keyed by it, stays
// within this bound (ValueBound).
const MaxIDBytes = 256

// ValueBound is the largest value a producer with Producer.MaxMessageBytes
// maxMessageBytes writes in one record keyed by up to maxKey bytes, without
// headers.
func ValueBound(maxMessageBytes, maxKey int) int {
	return maxMessageBytes - maxKey - recordFraming
}
