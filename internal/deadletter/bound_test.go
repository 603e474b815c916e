package deadletter

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// recordSize is a dead letter's record as Sarama counts it, less its
// framing: key, value, headers.
func recordSize(key string, dl *pb.DeadLetter, h goka.Headers) int {
	n := len(key) + proto.Size(dl)
	for k, v := range h {
		n += len(k) + len(v) + 2*binary.MaxVarintLen32
	}
	return n
}

// A letter that fits is written whole; one that does not loses its value
// first, then the record's headers, then the ends of its detail (cut on a
// rune boundary) and its key, the longer first, until it fits, and says so. A
// truncated letter is not replayed.
func TestBoundFitsALetterAndSaysWhatItLacks(t *testing.T) {
	const max = 4000
	letter := func(key string, value int, header int, detail string) (*pb.DeadLetter, goka.Headers) {
		h := goka.Headers{HeaderReason: []byte("too_long"), HeaderSource: []byte("onboarding/3/42")}
		dl := &pb.DeadLetter{Reason: "too_long", Detail: detail, SourceTopic: "onboarding", SourcePartition: 3, SourceOffset: 42,
			Key: []byte(key), Value: make([]byte, value)}
		if header > 0 {
			h["trace"] = make([]byte, header)
			dl.Headers = []*pb.Header{{Key: "trace", Value: make([]byte, header)}}
		}
		return dl, h
	}
	for _, c := range []struct {
		name                     string
		key                      string
		value, header            int
		detail                   string
		truncated, headers, keep bool // headers: the record's headers kept; keep: the whole key
	}{
		{name: "fits", key: "u1", value: 3000, header: 100, detail: "d", headers: true, keep: true},
		{name: "value", key: "u1", value: 5000, header: 100, detail: "d", truncated: true, headers: true, keep: true},
		{name: "headers", key: "u1", value: 5000, header: 3000, detail: "d", truncated: true, keep: true},
		{name: "key", key: strings.Repeat("k", 3000), value: 10, header: 10, detail: "d", truncated: true},
		{name: "detail", key: "u1", value: 10, detail: strings.Repeat("é", 3000), truncated: true, keep: true},
	} {
		dl, h := letter(c.key, c.value, c.header, c.detail)
		key := bound(max, c.key, dl, h)
		if n := recordSize(key, dl, h); n > max {
			t.Errorf("%s: record of %d bytes, bound %d", c.name, n, max)
		}
		if dl.GetTruncated() != c.truncated || (len(dl.GetHeaders()) > 0) != c.headers || (h["trace"] != nil) != c.headers || (key == c.key) != c.keep || string(dl.GetKey()) != key {
			t.Errorf("%s: truncated %v, %d headers %v, key of %d bytes (letter's %d): want truncated %v, headers %v, whole key %v",
				c.name, dl.GetTruncated(), len(dl.GetHeaders()), h, len(key), len(dl.GetKey()), c.truncated, c.headers, c.keep)
		}
		if h[HeaderReason] == nil || h[HeaderSource] == nil || !utf8.ValidString(dl.GetDetail()) {
			t.Errorf("%s: headers %v, detail valid UTF-8 %v", c.name, h, utf8.ValidString(dl.GetDetail()))
		}
		if c.name == "key" && !strings.HasPrefix(dl.GetDetail(), c.detail+"; the record is too large") {
			t.Errorf("key: detail %q, want the detail kept whole", dl.GetDetail())
		}
		if !c.truncated {
			if len(dl.GetValue()) != c.value || dl.GetDetail() != c.detail {
				t.Errorf("%s: value of %d bytes, detail %q: changed", c.name, len(dl.GetValue()), dl.GetDetail())
			}
			continue
		}
		if len(dl.GetValue()) != 0 || dl.GetValueSize() != int64(c.value) || len(dl.GetValueSha256()) != 32 || !strings.Contains(dl.GetDetail(), "read it at onboarding/3/42") {
			t.Errorf("%s: value of %d bytes, size %d, digest %x, detail %q", c.name, len(dl.GetValue()), dl.GetValueSize(), dl.GetValueSha256(), dl.GetDetail())
		}
		err := Replayable(Entry{Letter: dl}, map[string]bool{"onboarding": true})
		if !errors.Is(err, ErrNotReplayable) || !strings.Contains(err.Error(), "onboarding/3/42") {
			t.Errorf("%s: Replayable: %v, want ErrNotReplayable naming where the original is", c.name, err)
		}
	}
}
