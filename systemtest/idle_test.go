package systemtest

import (
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/kafkatest"
)

// What an idle hour does to a deployment, in seconds: the broker closes a
// client's connection once it has been idle for connections.max.idle.ms
// (10 minutes by default, 3 s here). Consumers keep theirs with their
// fetches; the producers, the scheduler's and the dialer's, sit idle while
// nothing is due, so theirs are closed. The first follow-ups after such a
// stretch fire as promptly as steady ones: within 2.5 times the steady
// p99, or 50 ms, whichever is more (one producer retry after a dead
// connection costs its 100 ms backoff alone).
func TestFirstFireAfterAnIdleStretch(t *testing.T) {
	if testing.Short() {
		t.Skip("system test against Apache Kafka; skipped with -short")
	}
	const idleClose = 3 * time.Second
	broker := kafkatest.StartForTest(t, kafkatest.WithProperty("connections.max.idle.ms", "3000"))
	brokers := broker.Addr()
	pfx, parts := prefix(t), 4
	prov := newProvider(t)
	ivr := start(t, "run", append([]string{"run", "--http", ""}, roleArgs(t, brokers, pfx, parts, "--provider", "webhook", "--webhook-url", prov.url())...)...)
	ivr.awaitReady(1, 90*time.Second)

	// Everything is scheduled at once, so that nothing is written between
	// the steady follow-ups and those after the stretch: the first ones
	// warm fresh topics up, the steady ones are measured, then nothing is
	// due for four times the broker's idle limit.
	begin := time.Now().Add(4 * time.Second)
	warm := begin
	steadyFrom := warm.Add(3 * time.Second)
	steadyTo := steadyFrom.Add(3 * time.Second)
	after := steadyTo.Add(4 * idleClose)
	plan := spread(100, 2, warm, 2*time.Second)
	for u, tasks := range spread(100, 2, steadyFrom, steadyTo.Sub(steadyFrom)) {
		for task, due := range tasks {
			plan[u]["steady-"+task] = due
		}
	}
	for u, tasks := range spread(25, 2, after, time.Second) {
		for task, due := range tasks {
			plan[u]["after-"+task] = due
		}
	}
	want := schedule(t, brokers, pfx, parts, plan)

	r := prov.waitAll(t, want, after.Add(60*time.Second), ivr)
	r.check(t)
	steady := r.latenessDue(want, steadyFrom, steadyTo)
	first := r.latenessDue(want, after, after.Add(2*time.Second))
	if len(steady) == 0 || len(first) != 50 {
		t.Fatalf("%d steady follow-ups, %d after the stretch (want 50)", len(steady), len(first))
	}
	p99 := steady[min(len(steady)-1, len(steady)*99/100)]
	bound := max(p99*5/2, 50*time.Millisecond)
	t.Logf("steady (%d): %s; after %v idle (%d): %s", len(steady), percentiles(steady), after.Sub(steadyTo), len(first), percentiles(first))
	if worst := first[len(first)-1]; worst > bound {
		t.Fatalf("after an idle stretch the latest follow-up was %v late, want at most %v (2.5× the steady p99 %v, or 50 ms)", worst, bound, p99)
	}
}
