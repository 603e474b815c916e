package systemtest

import (
	"context"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/kafkatest"
)

// Three scheduler instances share the partitions; one is stopped mid-run and
// another started. Every follow-up fires once, never early.
func TestRebalance(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 6
	prov := newProvider(t)
	args := func(role string) []string {
		return append([]string{role}, roleArgs(t, brokers, pfx, parts, "--provider", "webhook", "--webhook-url", prov.url())...)
	}
	dial := start(t, "dialer", args("dialer")...)
	s1 := start(t, "scheduler-1", args("scheduler")...)
	s2 := start(t, "scheduler-2", args("scheduler")...)
	s3 := start(t, "scheduler-3", args("scheduler")...)

	const window = 30 * time.Second
	begin := time.Now().Add(5 * time.Second)
	want := schedule(t, brokers, pfx, parts, spread(1500, 2, begin, window))

	time.Sleep(time.Until(begin.Add(8 * time.Second))) // the test's schedule: mid-run
	if err := s2.stop(); err != nil {
		t.Fatalf("graceful stop of scheduler-2: %v", err)
	}
	time.Sleep(time.Until(begin.Add(14 * time.Second)))
	s4 := start(t, "scheduler-4", args("scheduler")...)

	r := prov.waitAll(t, want, begin.Add(window+60*time.Second), dial, s1, s3, s4)
	r.check(t)
	if r.rawRepeats != 0 {
		t.Fatalf("%d repeated provider requests although the dialer never died", r.rawRepeats)
	}
}

// The Kafka broker is stopped and started again mid-run. The ivrsched
// process recovers by itself and nothing is lost.
func TestBrokerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("system test against Apache Kafka; skipped with -short")
	}
	broker := kafkatest.StartForTest(t)
	brokers := broker.Addr()
	pfx, parts := prefix(t), 4
	prov := newProvider(t)
	ivr := start(t, "run", append([]string{"run", "--http", ""}, roleArgs(t, brokers, pfx, parts, "--provider", "webhook", "--webhook-url", prov.url())...)...)

	const window = 30 * time.Second
	begin := time.Now().Add(5 * time.Second)
	want := schedule(t, brokers, pfx, parts, spread(1000, 2, begin, window))

	time.Sleep(time.Until(begin.Add(8 * time.Second))) // the test's schedule: mid-run
	down := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := broker.Restart(ctx); err != nil {
		t.Fatalf("restart broker: %v", err)
	}
	t.Logf("broker was down for %v", time.Since(down).Round(time.Millisecond))

	r := prov.waitAll(t, want, begin.Add(window+2*time.Minute), ivr)
	r.check(t)
	if err := ivr.exited(); err != nil {
		t.Fatal(err)
	}
	if err := ivr.stop(); err != nil {
		t.Fatalf("graceful stop after the broker restart: %v", err)
	}
}
