package deadletter

// Reason says why a processor rejected a record: the dead letter's reason
// code (DeadLetter.reason and the ivrsched-dlq-reason header). Both
// processors use this one set.
type Reason string

// The reasons a record is rejected. The scheduler rejects commands and
// ticks; the dialer rejects calls and statuses (ReasonUndecodable,
// ReasonMissingCallID, ReasonTooLong, ReasonUnreadableState,
// ReasonStateTooLarge).
const (
	ReasonUndecodable      Reason = "undecodable"
	ReasonUnknownCommand   Reason = "unknown_command"
	ReasonMissingUserID    Reason = "missing_user_id"
	ReasonKeyMismatch      Reason = "key_mismatch"
	ReasonMissingPhone     Reason = "missing_phone"
	ReasonInvalidPhone     Reason = "invalid_phone"
	ReasonUnknownTimeZone  Reason = "unknown_time_zone"
	ReasonNegativeDelay    Reason = "negative_delay"
	ReasonDelayTooLong     Reason = "delay_too_long"
	ReasonDueTooFarPast    Reason = "due_too_far_past"
	ReasonDueTooFarFuture  Reason = "due_too_far_future"
	ReasonMissingTaskID    Reason = "missing_task_id"
	ReasonDuplicateTaskID  Reason = "duplicate_task_id"
	ReasonMissingWhen      Reason = "missing_when"
	ReasonPayloadTooLarge  Reason = "payload_too_large"
	ReasonMisroutedForward Reason = "misrouted_after_forward"
	ReasonReservedUserID   Reason = "reserved_user_id"
	// A time outside the range the scheduler accepts (scheduler.MinTime to
	// MaxTime), or an invalid protobuf timestamp.
	ReasonTimeOutOfRange Reason = "time_out_of_range"
	// requested_at further from the record timestamp than --max-skew.
	ReasonRequestedAtSkew Reason = "requested_at_skew"
	ReasonMissingCallID   Reason = "missing_call_id"
	// The user's stored value does not decode. The scheduler's: the
	// command is not applied (a Forget still erases the user), or a due
	// follow-up of the user cannot be called. The dialer's: the call is not
	// placed (it may be one the value recorded), or the status is not
	// recorded (its result is published). See docs/design.md.
	ReasonUnreadableState Reason = "unreadable_state"
	// An Onboard whose phone number has no time zone in the numbering plan
	// (a +800 number) and that gives none: the calling windows cannot be
	// read, and there is no default zone.
	ReasonNoTimeZone Reason = "no_time_zone"
	// A follow-up's repeat that does not parse (every, cron, count, until).
	ReasonInvalidRepeat Reason = "invalid_repeat"
	// The calling policy allows no call to the user within 400 days of the
	// follow-up's due time (windows of the user's zones that never overlap,
	// or blackouts over all of them).
	ReasonNoOpening Reason = "no_opening"
	// A CallEnded without an attempt number or with an outcome that is not
	// final.
	ReasonInvalidCallEnded Reason = "invalid_call_ended"
	// An Onboard with more follow-ups than --max-follow-ups.
	ReasonTooManyFollowUps Reason = "too_many_follow_ups"
	// An Onboard that would leave its user more follow-ups pending than
	// --max-pending.
	ReasonTooManyPending Reason = "too_many_pending"
	// A user, task or call id, campaign id or script longer than its bound
	// (codec.MaxIDBytes, scheduler.MaxScriptBytes).
	ReasonTooLong Reason = "too_long"
	// The user's stored value, with the record applied, would be larger
	// than a record of the table may be: the record is not applied, the
	// value stays as it was.
	ReasonStateTooLarge Reason = "state_too_large"
)

// Reasons lists every reason, in the order above: the closed set of the
// dead-letter metric's reason label.
func Reasons() []Reason {
	return []Reason{ReasonUndecodable, ReasonUnknownCommand, ReasonMissingUserID, ReasonKeyMismatch, ReasonMissingPhone,
		ReasonInvalidPhone, ReasonUnknownTimeZone, ReasonNegativeDelay, ReasonDelayTooLong, ReasonDueTooFarPast,
		ReasonDueTooFarFuture, ReasonMissingTaskID, ReasonDuplicateTaskID, ReasonMissingWhen, ReasonPayloadTooLarge,
		ReasonMisroutedForward, ReasonReservedUserID, ReasonTimeOutOfRange, ReasonRequestedAtSkew, ReasonMissingCallID,
		ReasonUnreadableState, ReasonNoTimeZone, ReasonInvalidRepeat, ReasonNoOpening, ReasonInvalidCallEnded,
		ReasonTooManyFollowUps, ReasonTooManyPending, ReasonTooLong, ReasonStateTooLarge}
}
