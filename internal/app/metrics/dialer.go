package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/processors/dialer"
	"github.com/ivrsched/ivrsched/processors/dialer/placement"
)

// Dialer returns the collector of a dialer's metrics, read at scrape time
// from the counters the dialer and its placer keep (dialer.Stats,
// placement.Stats): calls taken, final outcomes by outcome, provider
// requests and their refusals, calls being placed and queued, this
// process's share of the calls per second, dead letters by reason.
func Dialer(d *dialer.Dialer, pl *placement.Placer) prometheus.Collector {
	ds, ps := &d.Stats, &pl.Stats
	help := func(what string) string { return what + " since the process started." }
	cs := []counter{
		{newDesc("dialer_calls_total", help("Calls the dialer took from ivr-calls and recorded in flight"), nil), ds.Accepted.Load},
		{newDesc("dialer_duplicate_calls_total", help("Calls dropped because their call id was in flight or placed already"), nil), ds.Duplicates.Load},
		{newDesc("dialer_calls_forgotten_total", help("Calls dropped because the scheduler fired them before their user's Forget, consumed first"), nil), ds.FiredBeforeForget.Load},
		{newDesc("dialer_calls_failed_total", help("Calls whose placement failed for good (refused, or the --call-deadline passed)"), nil), ps.Failed.Load},
		{newDesc("provider_requests_total", help("Requests sent to the call provider, retries included"), nil), ps.Requests.Load},
		{newDesc("provider_throttled_total", help("Provider requests answered 429 (retried)"), nil), ps.TooMany.Load},
		{newDesc("provider_server_errors_total", help("Provider requests answered 5xx (retried)"), nil), ps.ServerErrors.Load},
		{newDesc("dialer_calls_suppressed_total", help("Calls not placed because their number was on the do-not-call list when their turn came (OUTCOME_SUPPRESSED)"), nil), ps.Suppressed.Load},
		{newDesc("dialer_opt_outs_total", help("Numbers put on the do-not-call list because the recipient opted out during their call"), nil), ds.OptOuts.Load},
		{newDesc("dialer_opt_outs_ignored_total", help("Opt-outs that listed nothing: of a call the dialer does not hold, of another provider call, or of a record without a number"), nil), ds.OptOutsIgnored.Load},
		{newDesc("dialer_calls_resubmitted_total", help("Calls found in flight when a partition came to this process, and placed again"), nil), ps.Resubmitted.Load},
		{newDesc("dialer_inflight_unreadable_total", help("Stored values that listed calls in flight but did not decode when a partition came to this process (their calls are not placed again)"), nil), ps.Unreadable.Load},
	}
	outcome := newDesc("dialer_outcomes_total", "Final results of calls published on ivr-results, by outcome, since the process started.", nil, "outcome")
	inFlight := newDesc("dialer_calls_in_flight", "Calls a worker is placing now (at most --max-in-flight).", nil)
	queued := newDesc("dialer_calls_queued", "Calls waiting for a worker.", nil)
	rate := newDesc("dialer_rate_limit_cps", "This process's share of the calls per second (--cps × owned partitions / partitions; 0: no limit).", nil)
	dl := deadLetters("dialer", d.DeadLetters)
	descs := append(counterDescs(cs), outcome, inFlight, queued, rate, dl.desc)
	return &collector{descs: descs, collect: func(ch chan<- prometheus.Metric) {
		collectCounters(ch, cs)
		for o := range pb.Outcome_name {
			if o == int32(pb.Outcome_OUTCOME_UNSPECIFIED) {
				continue
			}
			ch <- prometheus.MustNewConstMetric(outcome, prometheus.CounterValue, float64(ds.Outcome(pb.Outcome(o))), OutcomeLabel(pb.Outcome(o)))
		}
		ch <- prometheus.MustNewConstMetric(inFlight, prometheus.GaugeValue, float64(ps.Placing.Load()))
		ch <- prometheus.MustNewConstMetric(queued, prometheus.GaugeValue, float64(ps.Queued.Load()))
		ch <- prometheus.MustNewConstMetric(rate, prometheus.GaugeValue, pl.Rate())
		dl.collect(ch)
	}}
}

// OutcomeLabel is an outcome's label value: its name in lower case without
// the OUTCOME_ prefix (answered, no_answer, ...).
func OutcomeLabel(o pb.Outcome) string {
	return strings.ToLower(strings.TrimPrefix(o.String(), "OUTCOME_"))
}
