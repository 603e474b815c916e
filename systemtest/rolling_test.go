package systemtest

import (
	"fmt"
	"testing"
	"time"
)

// A rolling restart: three scheduler instances (static members, as
// deployed with --instance-id) are stopped with SIGTERM and started again
// one after the other, each once the previous one is back, while
// follow-ups fire. Nothing is lost, nothing fires early; the lateness of
// the follow-ups due during the roll is logged.
func TestRollingRestart(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 6
	prov := newProvider(t)
	args := func(role, id string, extra ...string) []string {
		return append([]string{role}, roleArgs(t, brokers, pfx, parts, append([]string{"--instance-id", id, "--session-timeout", "10s"}, extra...)...)...)
	}
	dial := start(t, "dialer", args("dialer", "d1", "--provider", "webhook", "--webhook-url", prov.url())...)
	var scheds []*proc
	for i := range 3 {
		id := fmt.Sprintf("s%d", i+1)
		scheds = append(scheds, start(t, "scheduler-"+id, args("scheduler", id)...))
	}
	for _, p := range append([]*proc{dial}, scheds...) {
		p.awaitReady(1, 2*time.Minute)
	}

	const window = 40 * time.Second
	begin := time.Now().Add(5 * time.Second)
	want := schedule(t, brokers, pfx, parts, spread(1500, 2, begin, window))
	t.Logf("scheduled %d follow-ups, due over %v", len(want), window)

	time.Sleep(time.Until(begin.Add(5 * time.Second))) // the test's schedule: mid-run
	rollStart := time.Now()
	for _, s := range scheds {
		stopped := time.Now()
		if err := s.stop(); err != nil {
			t.Fatalf("graceful stop of %s: %v", s.name, err)
		}
		s.restart()
		s.awaitReady(2, 2*time.Minute)
		t.Logf("%s: SIGTERM to ready again in %v", s.name, time.Since(stopped).Round(time.Millisecond))
	}
	rollEnd := time.Now()
	if rollEnd.After(begin.Add(window)) {
		t.Errorf("the roll (%v) outlasted the follow-ups it should overlap", rollEnd.Sub(rollStart))
	}

	r := prov.waitAll(t, want, begin.Add(window+90*time.Second), append([]*proc{dial}, scheds...)...)
	t.Logf("rolling restart took %v; lateness of the follow-ups due during it: %s; before and after it: %s, %s",
		rollEnd.Sub(rollStart).Round(time.Millisecond), percentiles(r.latenessDue(want, rollStart, rollEnd)),
		percentiles(r.latenessDue(want, begin, rollStart)), percentiles(r.latenessDue(want, rollEnd, begin.Add(window))))
	r.check(t)
	if r.rawRepeats != 0 {
		t.Fatalf("%d repeated provider requests although the dialer never stopped", r.rawRepeats)
	}
}
