package systemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
)

// Three scheduler instances share the partitions; one is stopped mid-run and
// another started. Every follow-up fires once, never early.
func TestRebalance(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 6
	prov := newProvider(t)
	args := func(role string) []string { return append([]string{role}, roleArgs(t, brokers, pfx, parts)...) }
	dial := start(t, "dialer", append(args("dialer"), "--provider", "webhook", "--webhook-url", prov.url())...)
	// Each with its web server: `ivrsched upcoming` finds the three
	// through the group and merges their answers.
	s1 := start(t, "scheduler-1", append(args("scheduler"), "--http", freeAddr(t))...)
	s2 := start(t, "scheduler-2", append(args("scheduler"), "--http", freeAddr(t))...)
	s3 := start(t, "scheduler-3", append(args("scheduler"), "--http", freeAddr(t))...)

	const window = 30 * time.Second
	begin := time.Now().Add(5 * time.Second)
	want := schedule(t, brokers, pfx, parts, spread(1500, 2, begin, window))
	checkUpcoming(t, brokers, pfx, parts, want)

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
	back := time.Now()
	t.Logf("broker was down for %v", back.Sub(down).Round(time.Millisecond))

	r := prov.waitAll(t, want, begin.Add(window+2*time.Minute), ivr)
	r.check(t)
	// Follow-ups that fell due while the broker was down fire soon after it
	// is back: the roles probe it instead of sleeping out their backoff, and
	// take their failed members out of the group instead of waiting for
	// their sessions to time out. The first of them is placed within a few
	// seconds (it took 8 to 10 s before); the rest follow as fast as the
	// dialer places the backlog.
	var after []time.Duration
	for f, due := range want {
		if due.Before(back) && due.After(down) && r.firstPlaced[f].After(back) {
			after = append(after, r.firstPlaced[f].Sub(back))
		}
	}
	if len(after) == 0 {
		t.Fatal("no follow-up due during the outage was placed after it")
	}
	slices.Sort(after)
	t.Logf("%d follow-ups due during the outage placed after it: the first %v after the broker was back, median %v, last %v",
		len(after), after[0].Round(time.Millisecond), after[len(after)/2].Round(time.Millisecond), after[len(after)-1].Round(time.Millisecond))
	if after[0] > 4*time.Second {
		t.Fatalf("the first follow-up due during the outage was placed %v after the broker was back, want within 4s", after[0])
	}
	if err := ivr.exited(); err != nil {
		t.Fatal(err)
	}
	if err := ivr.stop(); err != nil {
		t.Fatalf("graceful stop after the broker restart: %v", err)
	}
}

// checkUpcoming runs `ivrsched upcoming --limit 200` until every partition
// answered (the group may still be settling): the follow-ups come in firing
// order, each as scheduled, from all partitions, so from every instance.
func checkUpcoming(t *testing.T, brokers, pfx string, parts int, want map[followUp]time.Time) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) { // a rebalance has no event to await here
		cmd := exec.Command(binary, "upcoming", "--limit", "200", "--brokers", brokers, "--topic-prefix", pfx)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("upcoming: %v: %s", err, stderr.String())
		}
		var got []admin.Upcoming
		seen := map[int32]bool{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var u admin.Upcoming
			if json.Unmarshal([]byte(l), &u) == nil {
				got = append(got, u)
				seen[u.Partition] = true
			}
		}
		if len(got) == 200 && len(seen) == parts && stderr.Len() == 0 {
			for i, u := range got {
				due, ok := want[followUp{u.UserID, u.TaskID}]
				if !ok || !due.Equal(u.DueAt) || (i > 0 && u.DueAt.Before(got[i-1].DueAt)) {
					t.Fatalf("upcoming line %d: %+v (scheduled %v, %v)", i, u, due, ok)
				}
			}
			t.Logf("upcoming: 200 follow-ups in firing order from %d partitions, %s to %s", len(seen), got[0].DueAt.Format(time.StampMilli), got[199].DueAt.Format(time.StampMilli))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("upcoming: %d lines from %d partitions; stderr %q", len(got), len(seen), stderr.String())
		}
	}
}
