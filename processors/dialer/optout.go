package dialer

import (
	"encoding/hex"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/suppress"
)

// Opt-outs. A status with OUTCOME_OPTED_OUT says the recipient asked during
// the call not to be called again (a provider's callback: Twilio's Gather
// with the opt-out digit, the webhook endpoint's outcome). The dialer then
// lists the number it placed the call to: the keyed hash its record of the
// call keeps (DialRecord.number_key, from the IVRCall the placer held when
// the record was created), never a number from the callback, which names
// only the call. The entry goes to ivr-suppressions from the loop callback,
// so it is produced with the status's record and committed with it: every
// scheduler and dialer sees it within a Kafka round trip, and a crash
// before the commit replays the status and writes it again.
//
// An opt-out of a call neither the user's value nor the placer holds, or
// whose provider call id differs from the one recorded (Twilio's CallSid:
// a signed request naming another call than the one Twilio reports on),
// is ignored and counted (Stats.OptOutsIgnored); no result is published.

// numberKey is the keyed hash of call's number for its record (nil
// without Config.NumberKey).
func (d *Dialer) numberKey(call *pb.IVRCall) []byte {
	if d.cfg.NumberKey == nil || call.GetPhone() == "" {
		return nil
	}
	return d.cfg.NumberKey(call.GetPhone())
}

// optOutHandled handles the opt-out status s of a readable value st (r the
// call's record, call the call the placer held, either may be nil) where
// onStatus's usual course would not: an unknown call, another provider
// call, and an opt-out after the call's final outcome. It reports whether
// it did; otherwise the status takes the usual course, in which apply and
// a replay list the number (optOut).
func (d *Dialer) optOutHandled(ctx goka.Context, st *pb.DialerState, r *pb.DialRecord, call *pb.IVRCall, s *pb.CallStatus) bool {
	switch {
	case r == nil && call == nil:
		d.ignoreOptOut(ctx, s, "no such call is recorded for the user")
		return true
	case r != nil && s.GetProviderCallId() != "" && r.GetProviderCallId() != "" && s.GetProviderCallId() != r.GetProviderCallId():
		d.ignoreOptOut(ctx, s, "the provider's call id differs from the one recorded")
		return true
	case r != nil && r.GetFinal() && ctx.Offset() > r.GetStatusOffset() && r.GetOutcome() != pb.Outcome_OUTCOME_OPTED_OUT:
		// The call's final outcome came first (callbacks may arrive out
		// of order): the opt-out still holds. The final result was
		// published already, so this one is not final.
		r.Outcome, r.StatusOffset = pb.Outcome_OUTCOME_OPTED_OUT, ctx.Offset()
		d.write(ctx, st, r, s)
		d.optOut(ctx, r, s)
		res := d.result(ctx, r, s, pb.Outcome_OUTCOME_OPTED_OUT)
		res.Final = false
		ctx.Emit(d.cfg.Topics.Results, ctx.Key(), res)
		return true
	}
	return false
}

func (d *Dialer) ignoreOptOut(ctx goka.Context, s *pb.CallStatus, why string) {
	d.Stats.Unknown.Add(1)
	d.Stats.OptOutsIgnored.Add(1)
	d.cfg.Logger.Warn("opt-out ignored: "+why, "call_id", s.GetCallId(), "user", ctx.Key())
}

// optOut puts the number of the call r records on the do-not-call list, as
// opted out by the call's recipient.
func (d *Dialer) optOut(ctx goka.Context, r *pb.DialRecord, s *pb.CallStatus) {
	key := r.GetNumberKey()
	if len(key) == 0 {
		// A record written before opt-outs were recorded: its number is
		// unknown here.
		d.Stats.OptOutsIgnored.Add(1)
		d.cfg.Logger.Error("opt-out of a call whose record holds no number: the number is not listed; list it with ivrsched suppress add",
			"call_id", s.GetCallId(), "user", ctx.Key())
		return
	}
	at := d.cfg.Clock.Now()
	if s.GetAt() != nil {
		at = s.GetAt().AsTime()
	}
	b, err := proto.Marshal(suppress.OptOut(s.GetCallId(), at))
	if err != nil {
		ctx.Fail(err) // a Suppression always encodes
	}
	ctx.Emit(goka.Stream(d.cfg.Topics.Suppressions), hex.EncodeToString(key), b)
	d.Stats.OptOuts.Add(1)
	d.cfg.Logger.Info("recipient opted out: the number is on the do-not-call list", "call_id", s.GetCallId(), "user", ctx.Key(),
		"entry", hex.EncodeToString(key)[:16])
}
