package deadletter

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// bound fits dead letter dl, keyed by key, with its record's headers, in
// max bytes (max <= 0: no bound) as Sarama counts a record against
// Producer.MaxMessageBytes: the key, the value, and each header's key and
// value with two varints. A letter that does not fit loses, in turn, until
// it fits: the record's value (its size and SHA-256 stay), the record's
// headers (the letter's own two stay), then the ends of the detail and
// the key, the longer first. It is then marked truncated, and its detail says
// what it lacks and where the original is. bound returns the key to write it
// under.
func bound(max int, key string, dl *pb.DeadLetter, headers goka.Headers) string {
	size := func() int {
		n := len(key) + proto.Size(dl)
		for k, v := range headers {
			n += len(k) + len(v) + 2*binary.MaxVarintLen32
		}
		return n
	}
	if max <= 0 || size() <= max {
		return key
	}
	detail := dl.GetDetail()
	sum := sha256.Sum256(dl.GetValue())
	dl.Truncated, dl.ValueSize, dl.ValueSha256, dl.Value = true, int64(len(dl.GetValue())), sum[:], nil
	note := fmt.Sprintf("; the record is too large for a dead letter: its value (%d bytes, sha256 %x) is not kept, read it at %s/%d/%d",
		dl.GetValueSize(), sum, dl.GetSourceTopic(), dl.GetSourcePartition(), dl.GetSourceOffset())
	dl.Detail = detail + note
	if size() > max && len(dl.GetHeaders()) > 0 {
		note += fmt.Sprintf(", nor its %d headers", len(dl.GetHeaders()))
		dl.Headers = nil
		for k := range headers {
			if k != HeaderReason && k != HeaderSource {
				delete(headers, k)
			}
		}
		dl.Detail = detail + note
	}
	// Then the longer of the detail and the key loses its end, in turn.
	cutDetail, keyNote := "", ""
	for whole := len(key); size() > max && len(detail)+len(key) > 0; {
		if over := size() - max; len(detail) >= len(key) {
			n := len(detail) - min(len(detail), over)
			for n > 0 && !utf8.RuneStart(detail[n]) { // a string field stays UTF-8
				n--
			}
			detail, cutDetail = detail[:n], " [cut]"
		} else { // written twice: the record's key and dl.Key
			key = key[:len(key)-min(len(key), (over+1)/2)]
			dl.Key = []byte(key)
			keyNote = fmt.Sprintf(", and its key of %d bytes is cut to %d", whole, len(key))
		}
		dl.Detail = detail + cutDetail + note + keyNote
	}
	return key
}
