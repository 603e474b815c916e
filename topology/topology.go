// Package topology names the topics and groups of ivrsched, places keys on
// partitions (Murmur2), creates the topics and lists each role's ACLs. The
// Kafka client configuration every component shares is
// internal/kafkaclient's.
//
//	producers ──► onboarding ──► [ivr-scheduler] ──► ivr-calls ──► [ivr-dialer] ──► ivr-results
//	                   ticks ──►   │    table    │ ──► followup-events      │ table │
//
// Goka derives a group's table topic (<group>-table) from the group name.
package topology

import (
	"github.com/lovoo/goka"
)

// Topics holds every topic and group name. Build it with NewTopics.
type Topics struct {
	Onboarding goka.Stream // commands for the scheduler, keyed by user id
	Ticks      goka.Stream // due-index ticks, one key per partition
	Calls      goka.Stream // IVRCall, keyed by user id
	Results    goka.Stream // CallResult, keyed by user id
	Events     goka.Stream // ScheduleEvent, keyed by user id

	SchedulerDLQ goka.Stream // DeadLetter: records the scheduler rejected
	DialerDLQ    goka.Stream // DeadLetter: records the dialer rejected

	// Policies holds the calling policy (compacted, one partition, key
	// policy.Key; the value is its canonical JSON encoding), read by every
	// scheduler instance through a Goka view.
	Policies goka.Table
	// Suppressions is the do-not-call list (compacted): each key a keyed
	// hash of an E.164 number (internal/suppress), each value a
	// Suppression, a tombstone lifting it. Every scheduler and dialer
	// instance reads it through a Goka view.
	Suppressions goka.Table

	Scheduler goka.Group
	Dialer    goka.Group
}

// NewTopics returns the default names, each prefixed with prefix.
func NewTopics(prefix string) Topics {
	return Topics{
		Onboarding:   goka.Stream(prefix + "onboarding"),
		Ticks:        goka.Stream(prefix + "ivr-scheduler-ticks"),
		Calls:        goka.Stream(prefix + "ivr-calls"),
		Results:      goka.Stream(prefix + "ivr-results"),
		Events:       goka.Stream(prefix + "followup-events"),
		SchedulerDLQ: goka.Stream(prefix + "scheduler-dlq"),
		DialerDLQ:    goka.Stream(prefix + "dialer-dlq"),
		Policies:     goka.Table(prefix + "ivr-policies"),
		Suppressions: goka.Table(prefix + "ivr-suppressions"),
		Scheduler:    goka.Group(prefix + "ivr-scheduler"),
		Dialer:       goka.Group(prefix + "ivr-dialer"),
	}
}

// SchedulerTable is the scheduler's group table: each user's pending follow-ups.
func (t Topics) SchedulerTable() goka.Table { return goka.GroupTable(t.Scheduler) }

// SchedulerLoop is the scheduler's loop topic (Goka's name for it): Wake
// messages from a tick to a user's key.
func (t Topics) SchedulerLoop() goka.Stream { return goka.Stream(string(t.Scheduler) + "-loop") }

// DialerTable is the dialer's group table: recent call ids per user.
func (t Topics) DialerTable() goka.Table { return goka.GroupTable(t.Dialer) }

// DialerLoop is the dialer's loop topic (Goka's <group>-loop): what became
// of each call placed, from the placement workers and the status callbacks,
// keyed by user id.
func (t Topics) DialerLoop() goka.Stream { return goka.Stream(string(t.Dialer) + "-loop") }
