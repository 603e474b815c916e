package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/processors/scheduler"
)

// Scheduler returns the collector of a scheduler's metrics, read at scrape
// time: its counters (scheduler.Stats), its dead letters by reason, and
// for every partition whose due index this process holds, the pending
// follow-ups (held ones too, and apart), those due and not fired yet, and the
// age of the oldest due one (dueindex.Index.Backlog, which walks the due
// follow-ups).
func Scheduler(s *scheduler.Scheduler) prometheus.Collector {
	st := &s.Stats
	help := func(what string) string { return what + " since the process started." }
	cs := []counter{
		{newDesc("followups_scheduled_total", help("Follow-ups scheduled by commands (new or updated)"), nil), st.Scheduled.Load},
		{newDesc("followups_fired_total", help("Follow-ups fired: their calls published (replays not counted)"), nil), st.Fired.Load},
		{newDesc("followups_cancelled_total", help("Follow-ups cancelled before they fired"), nil), st.Cancelled.Load},
		{newDesc("followups_rescheduled_total", help("Follow-ups rescheduled before they fired"), nil), st.Rescheduled.Load},
		{newDesc("followups_deferred_total", help("Follow-ups the calling policy moved after their requested time"), nil), st.Deferred.Load},
		{newDesc("followups_advanced_total", help("Deferred follow-ups moved earlier because a new calling policy allows it"), nil), st.Advanced.Load},
		{newDesc("followups_suppressed_total", help("Due follow-ups not called because their number is on the do-not-call list (KIND_SUPPRESSED)"), nil), st.Suppressed.Load},
		{newDesc("followups_parked_total", help("Due follow-ups a tick did not fire because a new calling policy made them wait"), nil), st.Parked.Load},
		{newDesc("due_indexes_reused_total", help("Partition opens that took their due index back after a rebalance instead of scanning their store"), nil), s.Punctuator().IndexesReused},
		{newDesc("retries_scheduled_total", help("Attempts scheduled after a call ended unanswered (the policy's retry rules)"), nil), st.Retries.Load},
		{newDesc("followups_ended_total", help("Follow-ups whose final outcome was reported (answered, exhausted, too old, cancelled while placed)"), nil), st.Ended.Load},
		{newDesc("followups_republished_total", help("Calls published again by replayed ticks (same call ids)"), nil), st.Republished.Load},
		{newDesc("users_forgotten_total", help("Users erased by a Forget"), nil), st.Forgotten.Load},
		{newDesc("users_expired_total", help("Users removed by retention (--retain)"), nil), st.Expired.Load},
		{newDesc("commands_total", help("Commands processed"), nil), st.Commands.Load},
		{newDesc("ticks_total", help("Ticks processed"), nil), st.Ticks.Load},
		{newDesc("tick_replays_total", help("Ticks replayed after a restart, whose calls were published again"), nil), st.Replays.Load},
	}
	pending := newDesc("followups_pending", "Follow-ups waiting to fire in a partition this process owns (held ones included).", nil, "partition")
	held := newDesc("followups_held", "Pending follow-ups held for this host's clock (the mark passed them on another host's clock), per owned partition.", nil, "partition")
	due := newDesc("followups_due", "Follow-ups of an owned partition due now and not fired yet.", nil, "partition")
	age := newDesc("followups_oldest_due_age_seconds", "How long ago the oldest follow-up due and not fired yet was due, per owned partition (0 when none is due).", nil, "partition")
	dl := deadLetters("scheduler", s.DeadLetters)
	descs := append(counterDescs(cs), pending, held, due, age, dl.desc)
	return &collector{descs: descs, collect: func(ch chan<- prometheus.Metric) {
		collectCounters(ch, cs)
		dl.collect(ch)
		now, parts, backlogs := s.Punctuator().Backlogs()
		for i, part := range parts {
			b, p := backlogs[i], strconv.Itoa(int(part))
			ch <- prometheus.MustNewConstMetric(pending, prometheus.GaugeValue, float64(b.Pending), p)
			ch <- prometheus.MustNewConstMetric(held, prometheus.GaugeValue, float64(b.Held), p)
			ch <- prometheus.MustNewConstMetric(due, prometheus.GaugeValue, float64(b.Due), p)
			a := 0.0
			if !b.OldestDue.IsZero() {
				a = max(now.Sub(b.OldestDue).Seconds(), 0)
			}
			ch <- prometheus.MustNewConstMetric(age, prometheus.GaugeValue, a, p)
		}
	}}
}

// deadLetterCounter counts a role's dead letters by reason: every reason
// of deadletter.Reasons, at 0 until one is sent, so rates and alerts see
// each series from the start.
type deadLetterCounter struct {
	desc   *prometheus.Desc
	counts func() map[string]int64
}

func deadLetters(role string, counts func() map[string]int64) deadLetterCounter {
	return deadLetterCounter{
		desc: newDesc("dead_letters_total", "Records sent to the role's dead-letter topic, by reason.",
			prometheus.Labels{"role": role}, "reason"),
		counts: counts,
	}
}

func (d deadLetterCounter) collect(ch chan<- prometheus.Metric) {
	n := d.counts()
	for _, r := range deadletter.Reasons() {
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(n[string(r)]), string(r))
		delete(n, string(r))
	}
	for r, v := range n { // a reason of another version: still a closed set
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.CounterValue, float64(v), r)
	}
}
