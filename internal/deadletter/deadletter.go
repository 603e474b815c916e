// Package deadletter routes records a processor cannot accept to a
// dead-letter topic, with the reason, so that the pipeline keeps running and
// nothing is lost: the original key, value, headers and source position
// travel in a DeadLetter envelope.
package deadletter

import (
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/redact"
)

// Header names added to every dead letter.
const (
	HeaderReason = "ivrsched-dlq-reason"
	HeaderSource = "ivrsched-dlq-source" // topic/partition/offset
)

// Writer sends dead letters from inside a Goka callback. Its topic must be
// declared as an output of the group (Edge).
type Writer struct {
	Topic  goka.Stream
	Group  goka.Group
	Clock  clock.Clock // required: stamps DeadLetter.at
	Logger *slog.Logger
	// MaxBytes bounds each dead letter's record as Sarama counts it
	// against Producer.MaxMessageBytes (its key, value and headers): a
	// letter larger than that keeps the rejected record's size and digest
	// instead of its value (DeadLetter.truncated). The processors give it
	// the bound of their table's values, kafkaclient.ValueBound of the
	// producer's config, which leaves room for a record's framing. 0: no
	// bound.
	MaxBytes int

	counts sync.Map // reason → *atomic.Int64
}

// Edge declares the dead-letter topic as an output of a group graph.
func (w *Writer) Edge() goka.Edge { return goka.Output(w.Topic, new(codec.DeadLetter)) }

// Value is the value to keep in a dead letter for msg, a record's decoded
// value: the bytes of an undecodable record (*codec.Undecodable), or the
// message encoded again.
func Value(msg any) []byte {
	switch m := msg.(type) {
	case *codec.Undecodable:
		return m.Data
	case proto.Message:
		b, _ := proto.Marshal(m)
		return b
	}
	return nil
}

// Send writes the record being processed to the dead-letter topic. value is
// the record's value (Value). The detail is masked (redact.Text) in the
// dead letter and its log line: a reason may quote a phone number, which
// only the record's own value keeps, for a replay.
func (w *Writer) Send(ctx goka.Context, reason Reason, detail string, value []byte) {
	w.SendKey(ctx, ctx.Key(), reason, detail, value)
}

// SendKey writes a dead letter keyed by key (not the record's key) from the
// callback processing ctx's record, which is its source: for a value the
// callback found unusable, such as a user's stored value that a tick could
// not read.
func (w *Writer) SendKey(ctx goka.Context, key string, reason Reason, detail string, value []byte) {
	now := w.Clock.Now()
	detail = redact.Text(detail)
	src := fmt.Sprintf("%s/%d/%d", ctx.Topic(), ctx.Partition(), ctx.Offset())
	dl := &pb.DeadLetter{
		Reason:          string(reason),
		Detail:          detail,
		Group:           string(w.Group),
		SourceTopic:     string(ctx.Topic()),
		SourcePartition: ctx.Partition(),
		SourceOffset:    ctx.Offset(),
		SourceTimestamp: timestamppb.New(ctx.Timestamp()),
		Key:             []byte(key),
		Value:           value,
		At:              timestamppb.New(now),
	}
	headers := goka.Headers{}
	keys := make([]string, 0, len(ctx.Headers()))
	for k := range ctx.Headers() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := ctx.Headers()[k]
		dl.Headers = append(dl.Headers, &pb.Header{Key: k, Value: v})
		headers[k] = v
	}
	headers[HeaderReason] = []byte(reason)
	headers[HeaderSource] = []byte(src)
	key = bound(w.MaxBytes, key, dl, headers)
	detail = dl.GetDetail()
	ctx.Emit(w.Topic, key, dl, goka.WithCtxEmitHeaders(headers))

	c, _ := w.counts.LoadOrStore(string(reason), new(atomic.Int64))
	n := c.(*atomic.Int64).Add(1)
	if w.Logger != nil {
		w.Logger.Warn("dead letter", "reason", reason, "detail", detail, "source", src, "key", key, "reason_total", n)
	}
}

// Counts returns how many dead letters were sent, per reason.
func (w *Writer) Counts() map[string]int64 {
	out := map[string]int64{}
	w.counts.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}
