package scheduler

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
)

// taskPos is a user's follow-up's firing position.
func taskPos(user string, t *pb.Task) dueindex.Pos {
	return dueindex.Pos{Due: t.GetDueAt().AsTime().UnixNano(), User: user, Task: t.GetTaskId()}
}

func pos(p *pb.Position) dueindex.Pos {
	if p == nil {
		return dueindex.Pos{}
	}
	return dueindex.Pos{Due: p.GetDueAt().AsTime().UnixNano(), User: p.GetUserId(), Task: p.GetTaskId()}
}

func position(p dueindex.Pos) *pb.Position {
	if p.IsZero() {
		return nil
	}
	return &pb.Position{DueAt: timestamppb.New(p.Time()), UserId: p.User, TaskId: p.Task}
}

func markValue(key string, m dueindex.Mark) *pb.UserState {
	return &pb.UserState{UserId: key, FiredThrough: &pb.FiredThrough{
		Through:     position(m.Through),
		Staged:      position(m.Staged),
		StagedAt:    timestamppb.New(time.Unix(0, m.StagedAt)),
		Checkpoint:  position(m.Checkpoint),
		TickOffset:  m.LastTick,
		SweptPolicy: m.Swept,
	}}
}
