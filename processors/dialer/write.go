package dialer

import (
	"errors"
	"fmt"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
)

// write writes the user's value st, in which status s changed record r,
// encoded once. A value larger than MaxValueBytes first loses its oldest
// records, as History drops them (they only keep a repeat of an old call
// from being placed again; the provider drops one by its idempotency key
// too), never r. If r alone, with the calls an earlier version listed in
// flight, does not fit, nothing is written: s goes to the dead-letter
// topic as state_too_large, and the caller publishes its result as usual.
// (Written, such a value would fail at the table's producer, and the
// partition would fail again at every replay of the status.)
func (d *Dialer) write(ctx goka.Context, st *pb.DialerState, r *pb.DialRecord, s *pb.CallStatus) {
	b, n, err := codec.EncodeFitting(st, d.cfg.MaxValueBytes, func(excess int) int {
		// Each record dropped shortens the encoding by more than its size
		// (a tag and a length come with it), so one pass usually does.
		kept := make([]*pb.DialRecord, 0, len(st.Calls))
		for _, c := range st.Calls { // oldest first
			if excess > 0 && c != r {
				excess -= proto.Size(c) + 2
				continue
			}
			kept = append(kept, c)
		}
		n := len(st.Calls) - len(kept)
		st.Calls = kept
		return n
	})
	d.Stats.Trimmed.Add(int64(n))
	switch {
	case errors.Is(err, codec.ErrTooLarge):
		d.Stats.Invalid.Add(1)
		d.dlq.Send(ctx, deadletter.ReasonStateTooLarge, fmt.Sprintf("the dialer's value of user %q with the record of call %s alone is too large (%v): the status is not recorded; its result is published",
			ctx.Key(), r.GetCallId(), err), deadletter.Value(s))
	case err != nil:
		ctx.Fail(fmt.Errorf("encode the dialer's value of user %q: %w", ctx.Key(), err))
	default:
		ctx.SetValue(b)
	}
}
