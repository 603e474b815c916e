package scheduler

import (
	"errors"
	"fmt"
	"time"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
)

// onTick publishes the calls of the partition's due follow-ups and moves the
// partition's fired mark past them. It writes only the mark (under the
// tick's key): users' values are left as they are, and a follow-up at or
// before the mark counts as fired.
//
// A due follow-up computed under another calling policy than the one in
// force is checked again (mayFire). If it must now wait, it is not fired:
// the index parks it, a Wake (KIND_POLICY) asks its user's callback to move
// it to its new effective time, and the follow-ups after it wait for that
// too (they are put back, and the index hands out none after a parked one),
// so the mark never passes a follow-up that did not fire.
//
// The first tick after the partition was opened may be a replay (its offset
// is at or below the last tick that moved the mark: the process stopped
// before committing it). Then the calls fired since the tick was sent are
// published again, with the same call ids, for the dialer to drop the ones
// it already placed.
func (s *Scheduler) onTick(ctx goka.Context, msg any) {
	tick, ok := msg.(*pb.Tick)
	if !ok {
		s.rejectRecord(ctx, msg, reject(deadletter.ReasonUndecodable, "tick: %v", undecodable(msg)))
	}
	part := ctx.Partition()
	s.Stats.Ticks.Add(1)
	defer s.punct.Ticked(part)
	idx := s.punct.Index(part)
	if idx == nil {
		return
	}
	mark := idx.Mark()
	now := s.cfg.Clock.Now()
	if err := idx.Fill(now); err != nil { // an index that keeps a window of the store's due order reads ahead
		ctx.Fail(fmt.Errorf("tick of partition %d: %w", part, err))
	}
	if idx.Replaying() {
		from := pos(tick.GetFiredThrough())
		fired, scanTo := idx.Replayed(from)
		if ok && !mark.Through.IsZero() && ctx.Offset() <= mark.LastTick {
			s.Stats.Replays.Add(1)
			if !scanTo.IsZero() {
				s.Stats.ReplayScans.Add(1)
				older, err := s.punct.FiredBetween(part, from, scanTo)
				if err != nil {
					ctx.Fail(fmt.Errorf("replay of partition %d: %w", part, err))
				}
				fired = append(older, fired...)
			}
			s.cfg.Logger.Info("replayed tick: publishing its calls again", "partition", part, "offset", ctx.Offset(), "calls", len(fired))
			s.publish(ctx, part, fired, now, true)
		}
	}
	s.wake(ctx, idx.TakeTimers(now, s.cfg.MaxFiresPerTick))
	var done []dueindex.Pos
	if due := idx.TakeDue(now, s.cfg.MaxFiresPerTick); len(due) > 0 {
		done = s.publish(ctx, part, due, now, false) // none if the first due follow-up is parked: the mark stays before it
	}
	swept, sweptAll := s.sweepDeferred(ctx, part, now)
	if len(done) == 0 && !sweptAll {
		return
	}
	next := mark
	if len(done) > 0 {
		next.Through = done[len(done)-1]
		next.LastTick = max(mark.LastTick, ctx.Offset())
		if now.Sub(time.Unix(0, mark.StagedAt)) >= s.cfg.ReplayKeep {
			next.Checkpoint, next.Staged, next.StagedAt = mark.Staged, mark.Through, now.UnixNano()
		}
	}
	if sweptAll {
		next.Swept = swept
	}
	ctx.SetValue(markValue(ctx.Key(), next)) // the storage wrapper also moves the due index's mark
}

// sweepBatch bounds the deferred follow-ups one tick looks at after a
// policy change (about 5 to 10 µs each: a store read, a decode and the
// policy's Effective).
const sweepBatch = 1000

// sweepDeferred looks at the partition's deferred follow-ups once after the
// calling policy changed, a batch per tick: a follow-up the policy in force
// would call before its effective time (a window widened, a blackout
// removed) is sent to its user's callback (a Wake, KIND_POLICY), which moves
// it to its new effective time, counted from the tick's time. Follow-ups
// the new policy makes wait longer are left to the tick that finds them
// due (mayFire parks them). It returns the policy's version and whether
// the sweep is complete, for the mark to record it (Mark.Swept). A store
// that cannot be read fails the partition, like the rest of the tick.
func (s *Scheduler) sweepDeferred(ctx goka.Context, part int32, now time.Time) (string, bool) {
	pol := s.policyNow()
	v := version(pol)
	ps, done, err := s.punct.Index(part).SweepDeferred(v, sweepBatch)
	if err != nil {
		ctx.Fail(fmt.Errorf("partition %d: %w", part, err))
	}
	if len(ps) == 0 {
		return v, done
	}
	table := s.punct.Table(part)
	at := timestamppb.New(now)
	for _, p := range ps {
		st, _, err := stored(table, p.User)
		if err != nil {
			var re *RejectError
			if errors.As(err, &re) {
				continue // its tick dead-letters it when it is due
			}
			ctx.Fail(fmt.Errorf("sweep the deferred follow-ups of partition %d: %w", part, err))
		}
		t := findTask(st, p, false)
		if t == nil || t.GetHeld() || t.GetPolicyVersion() == v {
			continue
		}
		if r, err := effective(pol, st, t, now); err != nil || !r.At.Before(t.GetDueAt().AsTime()) {
			continue // an error is the user's callback's to report, when the follow-up is due
		}
		ctx.Loopback(p.User, &pb.Wake{Kind: pb.Wake_KIND_POLICY, TaskId: p.Task, DueAt: t.GetDueAt(), At: at})
	}
	return v, done
}

// publish emits the calls of the follow-ups at ps, reading each user's value
// from the partition's store once, and returns the positions it is done
// with: fired, or dead-lettered. A replay also finds follow-ups the user's
// value has since recorded as fired, and fires all of them again.
//
// Otherwise a follow-up that must wait for the calling policy (mayFire) is
// parked and its user woken (KIND_POLICY); the ones after it are put back
// into the index, not fired, so the positions returned all come before
// the first parked one and the mark can move to the last.
//
// A follow-up whose number is on the do-not-call list is not called but
// reported (KIND_SUPPRESSED) and done all the same; a replay checks the
// list again.
//
// Nothing is skipped silently: a store that cannot be read, or a follow-up
// the index holds but its user's value does not, fails the partition
// (ctx.Fail: Goka stops the processor before the tick is committed, the
// role restarts it, the index is rebuilt from the store and the tick
// replays). A stored value that does not decode cannot be called (it has
// no phone to call) and would fail every replay the same way, so its
// follow-up goes to the dead-letter topic as unreadable_state with the
// stored bytes, for an operator to act on, and the partition goes on.
func (s *Scheduler) publish(ctx goka.Context, part int32, ps []dueindex.Pos, now time.Time, replay bool) (done []dueindex.Pos) {
	table := s.punct.Table(part)
	idx := s.punct.Index(part)
	states := make(map[string]*pb.UserState)
	firedAt := timestamppb.New(now)
	pol := s.policyNow()
	blocked := false
	calls := 0
	for _, p := range ps {
		st, ok := states[p.User]
		if !ok {
			var raw []byte
			var err error
			if st, raw, err = stored(table, p.User); err != nil {
				var re *RejectError
				if !errors.As(err, &re) {
					ctx.Fail(fmt.Errorf("fire partition %d: %w", part, err))
				}
				s.Stats.Unreadable.Add(1)
				s.dlq.SendKey(ctx, p.User, re.Reason, fmt.Sprintf("follow-up %q due %s not called: %s", p.Task, p.Time().UTC().Format(time.RFC3339Nano), re.Detail), raw)
				if !blocked {
					done = append(done, p)
				}
				continue
			}
			states[p.User] = st
		}
		t := findTask(st, p, replay)
		if t == nil {
			ctx.Fail(fmt.Errorf("fire partition %d: follow-up %q of user %q due %s is in the due index but not in the user's value",
				part, p.Task, p.User, p.Time().UTC().Format(time.RFC3339Nano)))
		}
		if !replay {
			if !mayFire(pol, st, t) {
				idx.Park(p)
				ctx.Loopback(p.User, &pb.Wake{Kind: pb.Wake_KIND_POLICY, TaskId: p.Task, DueAt: t.GetDueAt(), At: firedAt})
				s.Stats.Parked.Add(1)
				blocked = true
				continue
			}
			if blocked {
				idx.PutBack(p)
				continue
			}
		}
		if e := s.suppressed(ctx, st, t); e != nil {
			// Not called, reported, and done like a fired one: the mark
			// passes it; a series goes on (its next occurrence is checked
			// when due). The user's callback records it as suppressed, so
			// that the frequency cap does not count it.
			s.reportSuppressed(ctx, p.User, t, CallID(p.User, t), e, firedAt)
			ctx.Loopback(p.User, &pb.Wake{Kind: pb.Wake_KIND_SUPPRESSED, TaskId: p.Task, DueAt: t.GetDueAt(), At: firedAt})
		} else {
			ctx.Emit(s.cfg.Topics.Calls, p.User, s.call(st, t, CallID(p.User, t), firedAt))
			calls++
		}
		if !replay {
			s.observeLateness(now, float64(now.UnixNano()-p.Due)/1e9)
		}
		if t.GetRepeat() != nil { // its user's callback records the fire time and schedules the next occurrence
			ctx.Loopback(p.User, &pb.Wake{Kind: pb.Wake_KIND_RECUR, TaskId: p.Task, DueAt: t.GetDueAt(), At: firedAt})
		}
		done = append(done, p)
	}
	if replay {
		s.Stats.Republished.Add(int64(calls))
	} else {
		s.Stats.Fired.Add(int64(calls))
		if s.cfg.Retain > 0 && len(done) > 0 {
			s.retainIdle(part, states, done[len(done)-1])
		}
	}
	return done
}

// retainIdle gives the users whose last pending follow-up this tick fired
// (up to through, where the mark moves) their retention timers: the tick
// does not write their values, so the index does not see them go idle.
func (s *Scheduler) retainIdle(part int32, states map[string]*pb.UserState, through dueindex.Pos) {
	idx := s.punct.Index(part)
	for user, st := range states {
		idle := true
		for _, t := range st.GetPending() {
			if t.GetHeld() || through.Less(taskPos(user, t)) {
				idle = false
				break
			}
		}
		if idle {
			idx.AddRetention(user, lastActive(st))
		}
	}
}

// wake sends the due timers to their users' callbacks (onWake) through the
// loop topic.
func (s *Scheduler) wake(ctx goka.Context, timers []dueindex.Pos) {
	for _, p := range timers {
		kind := pb.Wake_KIND_HELD_DUE
		if p.Task == dueindex.RetentionTask {
			kind = pb.Wake_KIND_RETENTION
		}
		ctx.Loopback(p.User, &pb.Wake{Kind: kind, TaskId: p.Task, DueAt: timestamppb.New(p.Time())})
	}
}

// stored reads a user's value from the partition's store: an I/O error, or
// a *RejectError (unreadable_state) with the raw bytes when the value does
// not decode.
func stored(table interface{ Get(string) ([]byte, error) }, user string) (*pb.UserState, []byte, error) {
	if table == nil {
		return nil, nil, errors.New("partition not open")
	}
	raw, err := table.Get(user)
	if err != nil {
		return nil, nil, fmt.Errorf("read the value of user %q: %w", user, err)
	}
	st := &pb.UserState{}
	if err := proto.Unmarshal(raw, st); err != nil {
		return nil, raw, reject(deadletter.ReasonUnreadableState, "the stored value of user %q does not decode: %v", user, err)
	}
	return st, raw, nil
}

func findTask(st *pb.UserState, p dueindex.Pos, fired bool) *pb.Task {
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
