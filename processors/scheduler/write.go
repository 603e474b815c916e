package scheduler

import (
	"errors"
	"fmt"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/deadletter"
)

// write writes the user's value, encoded once, unless its encoding is
// larger than MaxValueBytes: then nothing is written, and the
// *RejectError (state_too_large) returned sends the record to the
// dead-letter topic, so the partition goes on and the user's value stays
// as it was. (Written, such a value would fail at the table's producer,
// and the partition would fail again at every replay of the record.)
func (s *Scheduler) write(ctx goka.Context, st *pb.UserState) error {
	b, err := codec.EncodeBounded(st, s.cfg.MaxValueBytes)
	switch {
	case errors.Is(err, codec.ErrTooLarge):
		return s.tooLarge(st, err)
	case err != nil:
		ctx.Fail(fmt.Errorf("encode the value of user %q: %w", st.GetUserId(), err))
	}
	ctx.SetValue(b) // the storage wrapper also updates the due index
	return nil
}

// fits checks the size of an Onboard's result before the command reports
// or fires anything, so that a command rejected as state_too_large did
// nothing. (proto.Size walks the value without encoding it; write checks
// the encoding again.)
func (s *Scheduler) fits(st *pb.UserState) error {
	if n := proto.Size(st); s.cfg.MaxValueBytes > 0 && n > s.cfg.MaxValueBytes {
		return s.tooLarge(st, fmt.Errorf("%w: %d bytes, limit %d", codec.ErrTooLarge, n, s.cfg.MaxValueBytes))
	}
	return nil
}

func (s *Scheduler) tooLarge(st *pb.UserState, err error) error {
	return reject(deadletter.ReasonStateTooLarge, "the value of user %q with the record applied (%d pending, %d fired) would be too large for its table: %v; the value is left as it was",
		st.GetUserId(), len(st.GetPending()), len(st.GetFired()), err)
}
