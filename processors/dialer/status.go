package dialer

import (
	"context"
	"fmt"
	"slices"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
)

// Publish sends a verified status callback to the dialer's loop topic, keyed
// by its user, and returns once Kafka acknowledged it (or ctx ended): the
// callback endpoint answers 2xx only for a status that will be recorded.
// It is the provider.StatusSink of the callback endpoints, called
// concurrently.
func (d *Dialer) Publish(ctx context.Context, s provider.Status) error {
	st := &pb.CallStatus{CallId: s.CallID, UserId: s.UserID, Outcome: s.Outcome, Final: s.Final, Detail: s.Detail,
		ProviderCallId: s.ProviderCallID, At: timestamppb.New(s.At)}
	prom, err := d.cfg.Loop.Emit(s.UserID, st)
	if err != nil {
		return fmt.Errorf("dialer: status of call %s: %w", s.CallID, err)
	}
	done := make(chan error, 1)
	prom.Then(func(err error) { done <- err })
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("dialer: status of call %s: %w", s.CallID, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// onStatus records what became of a call: the placement's answer (from the
// placer) or a status callback. The first one creates the call's record in
// the user's value (DialRecord), for a call the placer holds (or a value
// written by an earlier version lists in flight); the placer then no
// longer holds it, and commits its ivr-calls record once this status's
// writes are acknowledged. A status of a call neither holds (its user was
// forgotten) records nothing. Each one that tells something new is
// published as a CallResult (not one older than the status recorded:
// callbacks may arrive out of order); the final one once, and handed to
// OnFinal. A status at or below the loop offset the call's record holds is a
// replay after a crash: the write of the record may have reached Kafka
// without the result, so the result is published again.
func (d *Dialer) onStatus(ctx goka.Context, msg any) {
	s, ok := msg.(*pb.CallStatus)
	if !ok {
		d.undecodable(ctx, msg)
		return
	}
	if s.GetPlacement() {
		if s.GetOutcome() == pb.Outcome_OUTCOME_FAILED {
			d.Stats.Failed.Add(1)
			d.cfg.Logger.Warn("call failed", "call_id", s.GetCallId(), "user", ctx.Key(), "detail", s.GetDetail())
		} else if s.GetOutcome() != pb.Outcome_OUTCOME_SUPPRESSED { // not placed: the do-not-call list
			d.Stats.Placed.Add(1)
		}
	} else {
		d.Stats.Statuses.Add(1)
	}
	st, bad := d.value(ctx)
	if st == nil {
		st = &pb.DialerState{}
	}
	r := record(st, s.GetCallId())
	// The placer forgets the call in any case (recorded already: a status
	// after the first one).
	call := d.first(ctx, st, s)
	if s.GetOutcome() == pb.Outcome_OUTCOME_OPTED_OUT && bad == nil && d.optOutHandled(ctx, st, r, call, s) {
		return
	}
	switch {
	case bad != nil:
		d.unrecorded(ctx, s, call, bad)
	case r == nil && call != nil:
		r = &pb.DialRecord{CallId: call.GetCallId(), TaskId: call.GetTaskId(), Attempt: call.GetAttempt(), NumberKey: d.numberKey(call), RecipientZone: recipientZone(call)}
		st.Calls = append(st.Calls, r)
		if n := len(st.Calls) - d.cfg.History; n > 0 {
			st.Calls = append(st.Calls[:0:0], st.Calls[n:]...)
		}
		d.apply(ctx, st, r, s)
	case r == nil:
		// The user was forgotten while the call was placed, the call is
		// older than the user's history, or its answer replayed after a
		// crash before the call did: publish, record nothing. The
		// placement's answer says which follow-up it answers.
		d.Stats.Unknown.Add(1)
		ctx.Emit(d.cfg.Topics.Results, ctx.Key(), d.result(ctx, named(s), s, s.GetOutcome()))
	case ctx.Offset() <= r.GetStatusOffset():
		d.cfg.Logger.Info("status replayed after a restart; its result is published again", "call_id", s.GetCallId(), "offset", ctx.Offset())
		res := d.result(ctx, r, s, d.outcome(r, s))
		ctx.Emit(d.cfg.Topics.Results, ctx.Key(), res)
		if res.GetOutcome() == pb.Outcome_OUTCOME_OPTED_OUT {
			d.optOut(ctx, r, s) // the entry may not have reached Kafka either
		}
		if res.GetFinal() {
			d.final(ctx, res)
		}
	case r.GetFinal():
		d.Stats.Late.Add(1)
	case s.GetPlacement():
		// A status callback came first: the call is placed already.
		if r.GetProviderCallId() == "" && s.GetProviderCallId() != "" {
			r.ProviderCallId = s.GetProviderCallId()
			d.write(ctx, st, r, s)
		}
	case !s.GetFinal() && d.outcome(r, s) == r.GetOutcome() && (s.GetOutcome() != pb.Outcome_OUTCOME_MACHINE || r.GetMachine()):
		// Nothing new (a callback sent twice, or "initiated" after placed).
	case !s.GetFinal() && provider.Progress(s.GetOutcome()) < provider.Progress(r.GetOutcome()):
		// Older than the status recorded: callbacks may arrive out of
		// order ("initiated" after "ringing").
	default:
		d.apply(ctx, st, r, s)
	}
}

// named is the record of the call a status names, for a status recorded
// nowhere: the placement's answer carries the call's task and attempt.
func named(s *pb.CallStatus) *pb.DialRecord {
	return &pb.DialRecord{CallId: s.GetCallId(), TaskId: s.GetTaskId(), Attempt: s.GetAttempt()}
}

// unrecorded handles a status of a user whose stored value does not decode
// (bad): it is not recorded, and the value is kept as it is. The status is
// dead-lettered as unreadable_state; the placer no longer holds the call
// (first released it, call if it held it: its ivr-calls record is
// committed), and the result is published, a final one handed to the
// scheduler's retries and OnFinal: the call was placed, and what became of
// it is not lost. With no record to say so, a status the provider sends
// twice is published twice (the scheduler's retries recognize a second
// report of an attempt's outcome).
func (d *Dialer) unrecorded(ctx goka.Context, s *pb.CallStatus, call *pb.IVRCall, bad *codec.Undecodable) {
	r := named(s)
	if call != nil {
		r.TaskId, r.Attempt, r.RecipientZone = call.GetTaskId(), call.GetAttempt(), recipientZone(call)
	}
	d.unreadable(ctx, bad, fmt.Sprintf("the status of call %s is not recorded; its result is published", s.GetCallId()), s)
	if s.GetOutcome() == pb.Outcome_OUTCOME_OPTED_OUT {
		d.optOut(ctx, &pb.DialRecord{NumberKey: d.numberKey(call)}, s) // listed if the placer held the call
	}
	res := d.result(ctx, r, s, s.GetOutcome())
	ctx.Emit(d.cfg.Topics.Results, ctx.Key(), res)
	if res.GetFinal() {
		d.Stats.final(res.GetOutcome())
		d.final(ctx, res)
	}
}

// first returns the call whose first status s is, if the placer holds it
// or st lists it in flight (a value written by an earlier version: the
// call leaves in_flight), or nil.
func (d *Dialer) first(ctx goka.Context, st *pb.DialerState, s *pb.CallStatus) *pb.IVRCall {
	call := d.cfg.Placer.Record(ctx.Partition(), ctx.Key(), s.GetCallId(), ctx.Offset())
	if i := inFlight(st, s.GetCallId()); i >= 0 {
		call = st.InFlight[i]
		st.InFlight = slices.Delete(st.InFlight, i, i+1)
		if len(st.InFlight) == 0 {
			st.InFlight = nil
		}
	}
	return call
}

// outcome is what a status means for a call: a call answered by a machine
// ends as machine, whatever the status that ends it says.
func (d *Dialer) outcome(r *pb.DialRecord, s *pb.CallStatus) pb.Outcome {
	o := s.GetOutcome()
	if o == pb.Outcome_OUTCOME_ANSWERED && r.GetMachine() {
		return pb.Outcome_OUTCOME_MACHINE
	}
	return o
}

// apply records status s in r (a record of st), writes st and publishes
// the result.
func (d *Dialer) apply(ctx goka.Context, st *pb.DialerState, r *pb.DialRecord, s *pb.CallStatus) {
	if s.GetOutcome() == pb.Outcome_OUTCOME_MACHINE {
		r.Machine = true
	}
	o := d.outcome(r, s)
	r.Outcome, r.Final, r.StatusOffset = o, s.GetFinal(), ctx.Offset()
	r.At = s.GetAt()
	if r.At == nil {
		r.At = timestamppb.New(d.cfg.Clock.Now())
	}
	if s.GetProviderCallId() != "" {
		r.ProviderCallId = s.GetProviderCallId()
	}
	d.write(ctx, st, r, s)
	if o == pb.Outcome_OUTCOME_OPTED_OUT {
		d.optOut(ctx, r, s)
	}
	res := d.result(ctx, r, s, o)
	ctx.Emit(d.cfg.Topics.Results, ctx.Key(), res)
	if res.GetFinal() {
		d.Stats.final(o)
		d.final(ctx, res)
	}
}

// final hands a call's final outcome to the scheduler's retries and to
// OnFinal.
func (d *Dialer) final(ctx goka.Context, res *pb.CallResult) {
	d.reportEnded(ctx, res)
	if d.cfg.OnFinal != nil {
		d.cfg.OnFinal(ctx, res)
	}
}

func (d *Dialer) result(ctx goka.Context, r *pb.DialRecord, s *pb.CallStatus, o pb.Outcome) *pb.CallResult {
	at := s.GetAt()
	if at == nil {
		at = timestamppb.New(d.cfg.Clock.Now())
	}
	pid := s.GetProviderCallId()
	if pid == "" {
		pid = r.GetProviderCallId()
	}
	return &pb.CallResult{CallId: s.GetCallId(), UserId: ctx.Key(), TaskId: r.GetTaskId(), Attempt: r.GetAttempt(),
		Outcome: o, Detail: s.GetDetail(), At: at, Final: s.GetFinal(), ProviderCallId: pid, RecipientZone: r.GetRecipientZone()}
}
