package scheduler

import (
	"fmt"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
)

// ParseValue reads what the due index needs from an encoded UserState: the
// pending and fired follow-ups' task ids, due times, held and deferred
// flags, the fired mark, and the value's LastActive (lastActive).
// It runs on every table write, so it reads the wire instead of decoding the
// whole value; FuzzParseValue checks it against proto.Unmarshal.
func ParseValue(value []byte) (*dueindex.Value, error) {
	var (
		v                  = &dueindex.Value{}
		mark               []byte
		hasMark, hasUpdate bool
		updSec, updNsec    int64
	)
	err := eachField(value, func(num protowire.Number, typ protowire.Type, b []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case userStateUpdatedAt:
			hasUpdate = true
			return readTimestamp(b, &updSec, &updNsec)
		case userStatePending:
			t, err := parseTask(b)
			if err != nil {
				return err
			}
			v.Pending = append(v.Pending, t)
		case userStateFired:
			t, err := parseFired(b)
			if err != nil {
				return err
			}
			v.Fired = append(v.Fired, t)
		case userStateFiredThrough:
			mark = append(mark, b...) // concatenated encodings merge like repeated occurrences
			hasMark = true
		}
		return nil
	})
	if err == nil && hasMark {
		var ft pb.FiredThrough
		if err = proto.Unmarshal(mark, &ft); err == nil {
			v.Mark = &dueindex.Mark{
				Through:    pos(ft.GetThrough()),
				Staged:     pos(ft.GetStaged()),
				StagedAt:   ft.GetStagedAt().AsTime().UnixNano(),
				Checkpoint: pos(ft.GetCheckpoint()),
				LastTick:   ft.GetTickOffset(),
				Swept:      ft.GetSweptPolicy(),
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("decode user state: %w", err)
	}
	if hasUpdate {
		v.LastActive = time.Unix(updSec, updNsec).UnixNano()
	}
	for _, ts := range [][]dueindex.Task{v.Pending, v.Fired} {
		for _, t := range ts {
			v.LastActive = max(v.LastActive, t.Due)
		}
	}
	return v, nil
}

// lastActive is what ParseValue reads as LastActive from st's encoding: the
// latest of updated_at and every pending and fired due time.
func lastActive(st *pb.UserState) int64 {
	var n int64
	if st.GetUpdatedAt() != nil {
		n = st.GetUpdatedAt().AsTime().UnixNano()
	}
	for _, t := range st.GetPending() {
		n = max(n, t.GetDueAt().AsTime().UnixNano())
	}
	for _, f := range st.GetFired() {
		n = max(n, f.GetTask().GetDueAt().AsTime().UnixNano())
	}
	return n
}

// Field numbers read by ParseValue (see ivrsched.proto).
const (
	userStatePending      = 5 // UserState.pending
	userStateFired        = 6 // UserState.fired
	userStateFiredThrough = 7 // UserState.fired_through
	userStateUpdatedAt    = 8 // UserState.updated_at
	firedTaskTask         = 1 // FiredTask.task
	taskTaskID            = 1 // Task.task_id
	taskDueAt             = 2 // Task.due_at
	taskHeld              = 6 // Task.held
	taskDeferred          = 8 // Task.deferred
	timestampSeconds      = 1
	timestampNanos        = 2
)

// parseFired reads FiredTask.task; repeated occurrences merge.
func parseFired(b []byte) (dueindex.Task, error) {
	var task []byte
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == firedTaskTask && typ == protowire.BytesType {
			task = append(task, v...) // concatenated encodings merge like repeated occurrences
		}
		return nil
	})
	if err != nil {
		return dueindex.Task{}, err
	}
	return parseTask(task)
}

// parseTask reads Task.task_id and Task.due_at as proto.Unmarshal would:
// the last task_id wins, due_at occurrences merge, a missing due time is the
// zero Timestamp.
func parseTask(task []byte) (dueindex.Task, error) {
	var (
		sec, nsec int64
		id        string
		held      bool
		deferred  bool
	)
	err := eachField(task, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == taskHeld && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			held = x != 0
		case typ != protowire.BytesType:
		case num == taskTaskID:
			id = string(v)
		case num == taskDeferred:
			deferred = len(v) > 0
		case num == taskDueAt:
			return readTimestamp(v, &sec, &nsec)
		}
		return nil
	})
	return dueindex.Task{Due: time.Unix(sec, nsec).UnixNano(), ID: id, Held: held, Deferred: deferred}, err
}

// readTimestamp reads a Timestamp's fields into sec and nsec; repeated
// occurrences merge as proto.Unmarshal merges them.
func readTimestamp(b []byte, sec, nsec *int64) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.VarintType {
			return nil
		}
		x, _ := protowire.ConsumeVarint(v)
		switch num {
		case timestampSeconds:
			*sec = int64(x)
		case timestampNanos:
			*nsec = int64(int32(x))
		}
		return nil
	})
}

// eachField calls fn with every field of a protobuf message: its number,
// wire type and value bytes (for a varint, the varint itself).
func eachField(b []byte, fn func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			m, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			v, n = m, k
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return protowire.ParseError(n)
			}
			v = b[:n]
		}
		if err := fn(num, typ, v); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
