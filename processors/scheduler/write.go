package scheduler

import (
	"errors"
	"fmt"
	"math"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
)

// write writes the user's value, encoded once. A value larger than
// MaxValueBytes first loses fired follow-ups from its history, oldest
// first, those whose outcome is known before those still being placed
// (the history keeps them only for the frequency cap, late cancels and a
// retry's outcome; FiredHistory drops them the same way): recording a
// fire, and the next occurrence a recurring one brings, is never refused
// for the room the history takes, so a series does not stop and a held
// follow-up that fired is not left to fire again. If the value is too
// large without its history, nothing is written, and the *RejectError
// (state_too_large) returned sends the record to the dead-letter topic,
// so the partition goes on and the user's value stays as it was.
// (Written, such a value would fail at the table's producer, and the
// partition would fail again at every replay of the record.)
func (s *Scheduler) write(ctx goka.Context, st *pb.UserState) error {
	b, n, err := codec.EncodeFitting(st, s.cfg.MaxValueBytes, func(excess int) int { return trimFired(st, excess) })
	s.Stats.FiredTrimmed.Add(int64(n))
	switch {
	case errors.Is(err, codec.ErrTooLarge):
		return s.tooLarge(st, err)
	case err != nil:
		ctx.Fail(fmt.Errorf("encode the value of user %q: %w", st.GetUserId(), err))
	}
	ctx.SetValue(b) // the storage wrapper also updates the due index
	return nil
}

// trimFired drops fired follow-ups from st's history until their encoding
// makes up excess bytes: the oldest whose outcome is known first, then the
// oldest. It returns how many it dropped.
func trimFired(st *pb.UserState, excess int) int {
	drop := make([]bool, len(st.Fired))
	dropped := 0
	for _, ended := range []bool{true, false} {
		for i, f := range st.Fired { // oldest first
			if excess > 0 && !drop[i] && (!ended || f.GetTask().GetOutcome() != pb.Outcome_OUTCOME_UNSPECIFIED) {
				drop[i] = true
				dropped++
				excess -= proto.Size(f) + 2 // its tag and length too
			}
		}
	}
	kept := st.Fired[:0:0]
	for i, f := range st.Fired {
		if !drop[i] {
			kept = append(kept, f)
		}
	}
	st.Fired = kept
	return dropped
}

// nextRoom bounds what a recurring follow-up's next occurrence may carry
// besides what the follow-up itself does: its attempt, occurrence, series
// start and requested time, and a longer length.
var nextRoom = proto.Size(&pb.Task{Attempt: 1, Occurrence: math.MaxUint32, SeriesStart: timestamppb.New(MaxTime),
	RequestedAt: timestamppb.New(MaxTime)}) + 2

// fits checks the size of an Onboard's result before the command reports
// or fires anything, so that a command rejected as state_too_large did
// nothing. It leaves room for what firing the follow-ups adds that
// trimming the fired history cannot give back: each recurring one's next
// occurrence (nextRoom). (proto.Size walks the value without encoding it;
// write checks the encoding again.)
func (s *Scheduler) fits(st *pb.UserState) error {
	room := 0
	for _, t := range st.GetPending() {
		if t.GetRepeat() != nil {
			room += nextRoom
		}
	}
	if n := proto.Size(st); s.cfg.MaxValueBytes > 0 && n+room > s.cfg.MaxValueBytes {
		return s.tooLarge(st, fmt.Errorf("%w: %d bytes and %d for the next occurrences of its series, limit %d", codec.ErrTooLarge, n, room, s.cfg.MaxValueBytes))
	}
	return nil
}

func (s *Scheduler) tooLarge(st *pb.UserState, err error) error {
	return reject(deadletter.ReasonStateTooLarge, "the value of user %q with the record applied (%d pending, %d fired) would be too large for its table: %v; the value is left as it was",
		st.GetUserId(), len(st.GetPending()), len(st.GetFired()), err)
}
