package dialer

import (
	"fmt"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/deadletter"
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
	for {
		b, err := proto.Marshal(st)
		if err != nil {
			ctx.Fail(fmt.Errorf("encode the dialer's value of user %q: %w", ctx.Key(), err))
		}
		if len(b) <= d.cfg.MaxValueBytes {
			ctx.SetValue(codec.Encoded(b))
			return
		}
		// Each record dropped shortens the encoding by more than its size
		// (a tag and a length come with it), so one pass usually does.
		excess := len(b) - d.cfg.MaxValueBytes
		kept := make([]*pb.DialRecord, 0, len(st.Calls))
		for _, c := range st.Calls { // oldest first
			if excess > 0 && c != r {
				excess -= proto.Size(c) + 2
				continue
			}
			kept = append(kept, c)
		}
		n := len(st.Calls) - len(kept)
		if n == 0 {
			d.Stats.Invalid.Add(1)
			d.dlq.Send(ctx, deadletter.ReasonStateTooLarge, fmt.Sprintf("the dialer's value of user %q would be %d bytes with the record of call %s alone, limit %d: the status is not recorded; its result is published",
				ctx.Key(), len(b), r.GetCallId(), d.cfg.MaxValueBytes), deadletter.Value(s))
			return
		}
		st.Calls = kept
		d.Stats.Trimmed.Add(int64(n))
	}
}
