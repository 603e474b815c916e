package scheduler

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// CallID is deterministic from user, task, requested time and attempt, so a
// replay publishes the same id and the dialer drops the duplicate; a task
// id re-used for a new due time (a reschedule, the next occurrence of a
// series) gets a new id, and a follow-up the calling policy moves keeps
// its id.
func CallID(user string, t *pb.Task) string {
	h := sha256.New()
	h.Write([]byte(user))
	h.Write([]byte{0})
	h.Write([]byte(t.GetTaskId()))
	h.Write([]byte{0})
	var b [12]byte
	binary.BigEndian.PutUint64(b[:8], uint64(requested(t).UnixNano()))
	binary.BigEndian.PutUint32(b[8:], t.GetAttempt())
	h.Write(b[:])
	return hex.EncodeToString(h.Sum(nil)[:16])
}

func (s *Scheduler) call(st *pb.UserState, t *pb.Task, callID string, firedAt *timestamppb.Timestamp) *pb.IVRCall {
	return &pb.IVRCall{
		CallId:      callID,
		UserId:      st.GetUserId(),
		TaskId:      t.GetTaskId(),
		Phone:       st.GetPhone(),
		TimeZone:    st.GetTimeZone(),
		DueAt:       t.GetDueAt(),
		FiredAt:     firedAt,
		Attempt:     t.GetAttempt(),
		Action:      t.GetAction(),
		Payload:     t.GetPayload(),
		OnboardedAt: st.GetOnboardedAt(),
		// The value's place in the partition's order, for the dialer to
		// tell whether a Forget of the user came after the call.
		CreatedOffset: st.GetCreatedOffset(),
	}
}
