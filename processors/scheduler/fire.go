package scheduler

import (
	"fmt"
	"time"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/punctuation"
	"github.com/ivrsched/ivrsched/topology"
)

// onTick publishes the calls of the partition's due follow-ups and moves the
// partition's fired mark past them. It writes only the mark (under the
// tick's key): users' values are left as they are, and a follow-up at or
// before the mark counts as fired.
//
// The first tick after the partition was opened may be a replay (its offset
// is at or below the last tick that moved the mark: the process stopped
// before committing it). Then the calls fired since the tick was sent are
// published again, with the same call ids, for the dialer to drop the ones
// it already placed.
func (s *Scheduler) onTick(ctx goka.Context, msg any) {
	tick, ok := msg.(*pb.Tick)
	if !ok {
		s.rejectRecord(ctx, msg, reject(ReasonUndecodable, "tick: %v", undecodable(msg)))
	}
	part := ctx.Partition()
	defer s.punct.Ticked(part)
	idx := s.punct.Index(part)
	if idx == nil {
		return
	}
	mark := idx.Mark()
	now := s.cfg.Clock.Now()
	if idx.Replaying() {
		from := pos(tick.GetFiredThrough())
		fired, complete := idx.Replayed(from)
		if ok && !mark.Through.IsZero() && ctx.Offset() <= mark.LastTick {
			s.Stats.Replays.Add(1)
			if !complete {
				s.Stats.ReplayScans.Add(1)
				older, err := s.punct.FiredBetween(part, from, mark.Checkpoint)
				if err != nil {
					s.cfg.Logger.Error("replay: scan for fired follow-ups", "partition", part, "err", err)
				}
				fired = append(older, fired...)
			}
			s.cfg.Logger.Info("replayed tick: publishing its calls again", "partition", part, "offset", ctx.Offset(), "calls", len(fired))
			s.Stats.Republished.Add(int64(s.publish(ctx, part, fired, now, true)))
		}
	}
	due := idx.TakeDue(now, s.cfg.MaxFiresPerTick)
	if len(due) == 0 {
		return
	}
	s.Stats.Fired.Add(int64(s.publish(ctx, part, due, now, false)))
	next := mark
	next.Through = due[len(due)-1]
	next.LastTick = max(mark.LastTick, ctx.Offset())
	if now.Sub(time.Unix(0, mark.StagedAt)) >= s.cfg.ReplayKeep {
		next.Checkpoint, next.Staged, next.StagedAt = mark.Staged, mark.Through, now.UnixNano()
	}
	ctx.SetValue(markValue(ctx.Key(), next))
}

// publish emits the calls of the follow-ups at ps, reading each user's value
// from the partition's store once. A replay also finds follow-ups the user's
// value has since recorded as fired. It returns the calls emitted.
func (s *Scheduler) publish(ctx goka.Context, part int32, ps []punctuation.Pos, now time.Time, replay bool) int {
	table := s.punct.Table(part)
	states := make(map[string]*pb.UserState)
	firedAt := timestamppb.New(now)
	n := 0
	for _, p := range ps {
		st, ok := states[p.User]
		if !ok {
			st = s.stored(table, p.User)
			states[p.User] = st
		}
		t := findTask(st, p, replay)
		if t == nil {
			s.cfg.Logger.Error("due follow-up not in its user's value", "user", p.User, "task", p.Task, "due", p.Time())
			continue
		}
		ctx.Emit(s.cfg.Topics.Calls, p.User, s.call(st, t, CallID(p.User, t), firedAt))
		n++
	}
	return n
}

// stored reads a user's value from the partition's store.
func (s *Scheduler) stored(table interface{ Get(string) ([]byte, error) }, user string) *pb.UserState {
	st := &pb.UserState{UserId: user}
	if table == nil {
		return st
	}
	raw, err := table.Get(user)
	if err == nil {
		err = proto.Unmarshal(raw, st)
	}
	if err != nil {
		s.cfg.Logger.Error("read user state", "user", user, "err", err)
	}
	return st
}

// taskPos is a user's follow-up's firing position.
func taskPos(user string, t *pb.Task) punctuation.Pos {
	return punctuation.Pos{Due: t.GetDueAt().AsTime().UnixNano(), User: user, Task: t.GetTaskId()}
}

func findTask(st *pb.UserState, p punctuation.Pos, fired bool) *pb.Task {
	match := func(t *pb.Task) bool { return taskPos(p.User, t) == p }
	for _, t := range st.GetPending() {
		if match(t) {
			return t
		}
	}
	if fired {
		for _, f := range st.GetFired() {
			if match(f.GetTask()) {
				return f.GetTask()
			}
		}
	}
	return nil
}

// settle records in the user's value the follow-ups that ticks fired (those
// at or before the partition's mark); with publish, it also publishes their
// calls: a command scheduled them at or before the mark, where no tick will
// see them. It reports whether the value changed.
func (s *Scheduler) settle(ctx goka.Context, st *pb.UserState, publish bool) bool {
	keep, fired := s.splitFired(ctx.Partition(), ctx.Key(), st.Pending)
	if len(fired) == 0 {
		return false
	}
	now := timestamppb.New(s.cfg.Clock.Now())
	for _, f := range fired {
		if publish {
			f.FiredAt = now
			ctx.Emit(s.cfg.Topics.Calls, ctx.Key(), s.call(st, f.Task, f.CallId, f.FiredAt))
			s.Stats.Fired.Add(1)
		}
	}
	s.record(st, keep, fired)
	return true
}

// splitFired splits a user's pending follow-ups into those still pending and
// those at or before the partition's mark, which have fired.
func (s *Scheduler) splitFired(part int32, user string, pending []*pb.Task) (keep []*pb.Task, fired []*pb.FiredTask) {
	idx := s.punct.Index(part)
	if idx == nil {
		return pending, nil
	}
	for _, t := range pending {
		if !idx.Fired(taskPos(user, t)) {
			keep = append(keep, t)
			continue
		}
		fired = append(fired, &pb.FiredTask{Task: t, CallId: CallID(user, t)})
	}
	return keep, fired
}

// record sets the user's pending follow-ups and appends fired ones to the
// bounded history.
func (s *Scheduler) record(st *pb.UserState, keep []*pb.Task, fired []*pb.FiredTask) {
	st.Pending = keep
	st.Fired = append(st.Fired, fired...)
	if n := len(st.Fired) - s.cfg.FiredHistory; n > 0 {
		st.Fired = append(st.Fired[:0:0], st.Fired[n:]...)
	}
}

// Settled returns a user's value as the user's next command will record it:
// the follow-ups its partition's ticks fired moved from pending to fired. It
// is for display (the web UI's query page) and writes nothing. A value of a
// partition this instance does not own, or a partition's mark, is returned
// as it is.
func (s *Scheduler) Settled(st *pb.UserState) *pb.UserState {
	if st.GetFiredThrough() != nil {
		return st
	}
	part := topology.Partition(st.GetUserId(), max(s.cfg.Partitions, 1))
	out := proto.Clone(st).(*pb.UserState)
	keep, fired := s.splitFired(part, out.GetUserId(), out.GetPending())
	if len(fired) == 0 {
		return st
	}
	s.record(out, keep, fired)
	return out
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
	}
}

func pos(p *pb.Position) punctuation.Pos {
	if p == nil {
		return punctuation.Pos{}
	}
	return punctuation.Pos{Due: p.GetDueAt().AsTime().UnixNano(), User: p.GetUserId(), Task: p.GetTaskId()}
}

func position(p punctuation.Pos) *pb.Position {
	if p.IsZero() {
		return nil
	}
	return &pb.Position{DueAt: timestamppb.New(p.Time()), UserId: p.User, TaskId: p.Task}
}

func markValue(key string, m punctuation.Mark) *pb.UserState {
	return &pb.UserState{UserId: key, FiredThrough: &pb.FiredThrough{
		Through:    position(m.Through),
		Staged:     position(m.Staged),
		StagedAt:   timestamppb.New(time.Unix(0, m.StagedAt)),
		Checkpoint: position(m.Checkpoint),
		TickOffset: m.LastTick,
	}}
}

// ParseValue reads what the due index needs from an encoded UserState: the
// pending and fired follow-ups' task ids and due times, and the fired mark.
// It runs on every table write, so it reads the wire instead of decoding the
// whole value; FuzzParseValue checks it against proto.Unmarshal.
func ParseValue(value []byte) (*punctuation.Value, error) {
	var (
		v       = &punctuation.Value{}
		mark    []byte
		hasMark bool
	)
	err := eachField(value, func(num protowire.Number, typ protowire.Type, b []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
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
			v.Mark = &punctuation.Mark{
				Through:    pos(ft.GetThrough()),
				Staged:     pos(ft.GetStaged()),
				StagedAt:   ft.GetStagedAt().AsTime().UnixNano(),
				Checkpoint: pos(ft.GetCheckpoint()),
				LastTick:   ft.GetTickOffset(),
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("decode user state: %w", err)
	}
	return v, nil
}

// Field numbers read by ParseValue (see ivrsched.proto).
const (
	userStatePending      = 5 // UserState.pending
	userStateFired        = 6 // UserState.fired
	userStateFiredThrough = 7 // UserState.fired_through
	firedTaskTask         = 1 // FiredTask.task
	taskTaskID            = 1 // Task.task_id
	taskDueAt             = 2 // Task.due_at
	timestampSeconds      = 1
	timestampNanos        = 2
)

// parseFired reads FiredTask.task; repeated occurrences merge.
func parseFired(b []byte) (punctuation.Task, error) {
	var task []byte
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num == firedTaskTask && typ == protowire.BytesType {
			task = append(task, v...) // concatenated encodings merge like repeated occurrences
		}
		return nil
	})
	if err != nil {
		return punctuation.Task{}, err
	}
	return parseTask(task)
}

// parseTask reads Task.task_id and Task.due_at as proto.Unmarshal would:
// the last task_id wins, due_at occurrences merge, a missing due time is the
// zero Timestamp.
func parseTask(task []byte) (punctuation.Task, error) {
	var (
		sec, nsec int64
		id        string
	)
	err := eachField(task, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case taskTaskID:
			id = string(v)
		case taskDueAt:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if typ != protowire.VarintType {
					return nil
				}
				x, _ := protowire.ConsumeVarint(v)
				switch num {
				case timestampSeconds:
					sec = int64(x)
				case timestampNanos:
					nsec = int64(int32(x))
				}
				return nil
			})
		}
		return nil
	})
	return punctuation.Task{Due: time.Unix(sec, nsec).UnixNano(), ID: id}, err
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
