package systemtest

import (
	"bytes"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// The whole pipeline through the binary, all roles in one process: every
// follow-up reaches the provider once, never early, and /metrics counts
// them.
func TestPipeline(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 6
	prov := newProvider(t)
	web := freeAddr(t)
	ivr := start(t, "run", append([]string{"run", "--http", web}, roleArgs(t, brokers, pfx, parts, "--provider", "webhook", "--webhook-url", prov.url())...)...)

	plan := spread(500, 2, time.Now().Add(3*time.Second), 5*time.Second)
	want := schedule(t, brokers, pfx, parts, plan)
	r := prov.waitAll(t, want, time.Now().Add(90*time.Second), ivr)
	r.check(t)
	if r.rawRepeats != 0 {
		t.Fatalf("%d repeated provider requests without any crash", r.rawRepeats)
	}
	checkMetrics(t, web, parts, len(want))
	if err := ivr.stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	checkTopicConfigs(t, brokers, topology.NewTopics(pfx))
}

// checkTopicConfigs checks the topic settings the guarantees rest on, as
// Apache Kafka reports them: the broker stamps commands (LogAppendTime), so
// a producer's clock cannot move limits; tables keep tombstones for
// topology.TombstoneRetention; the scheduler's loop topic exists.
func checkTopicConfigs(t *testing.T, brokers string, topics topology.Topics) {
	t.Helper()
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: strings.Split(brokers, ",")}
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	want := map[string]map[string]string{
		string(topics.Onboarding):       {"message.timestamp.type": "LogAppendTime"},
		string(topics.SchedulerTable()): {"cleanup.policy": "compact", "delete.retention.ms": strconv.FormatInt(topology.TombstoneRetention.Milliseconds(), 10), "max.compaction.lag.ms": strconv.FormatInt(topology.CompactionLag.Milliseconds(), 10)},
		string(topics.DialerTable()):    {"cleanup.policy": "compact", "delete.retention.ms": strconv.FormatInt(topology.TombstoneRetention.Milliseconds(), 10), "max.compaction.lag.ms": strconv.FormatInt(topology.CompactionLag.Milliseconds(), 10)},
		string(topics.SchedulerLoop()):  {"cleanup.policy": "delete"},
	}
	for topic, cfg := range want {
		var names []string
		for n := range cfg {
			names = append(names, n)
		}
		entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: names})
		if err != nil {
			t.Fatalf("describe %s: %v", topic, err)
		}
		got := map[string]string{}
		for _, e := range entries {
			got[e.Name] = e.Value
		}
		for n, v := range cfg {
			if got[n] != v {
				t.Errorf("topic %s: %s=%q, want %q", topic, n, got[n], v)
			}
		}
	}
}

// Scheduler and dialer are killed with SIGKILL several times while they
// fire, and restarted at once. Nothing is lost, nothing fires early, no
// follow-up gets two call ids; the provider sees repeats only where the
// dialer died between placing a call and recording it.
func TestCrash(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 6
	prov := newProvider(t)
	common := func(id string) []string {
		return roleArgs(t, brokers, pfx, parts, "--instance-id", id, "--session-timeout", "6s")
	}
	sched := start(t, "scheduler", append([]string{"scheduler"}, common("s1")...)...)
	dial := start(t, "dialer", append(append([]string{"dialer"}, common("d1")...), "--provider", "webhook", "--webhook-url", prov.url())...)

	const window = 40 * time.Second
	begin := time.Now().Add(5 * time.Second)
	plan := spread(2000, 2, begin, window)
	want := schedule(t, brokers, pfx, parts, plan)
	t.Logf("scheduled %d follow-ups for %d users, due over %v", len(want), len(plan), window)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	kills := map[string]int{}
	for at := begin.Add(2 * time.Second); at.Before(begin.Add(window - 5*time.Second)); at = at.Add(time.Duration(3000+rng.IntN(5000)) * time.Millisecond) {
		time.Sleep(time.Until(at)) // the test's schedule of kills, not a wait for an event
		victim := sched
		if rng.IntN(3) == 0 {
			victim = dial
		}
		victim.kill9()
		kills[victim.name]++
		victim.restart()
	}
	if kills["scheduler"] == 0 || kills["scheduler"]+kills["dialer"] < 4 {
		t.Fatalf("too few kills: %v", kills)
	}
	r := prov.waitAll(t, want, begin.Add(window+90*time.Second), sched, dial)
	t.Logf("crash test: kills %d (scheduler %d, dialer %d), follow-ups scheduled %d", kills["scheduler"]+kills["dialer"], kills["scheduler"], kills["dialer"], len(want))
	b, err := os.ReadFile(sched.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("partitions that replayed a tick after a scheduler restart (their calls published again, for the dialer to drop): %d", bytes.Count(b, []byte("replayed tick")))
	// A killed process keeps its local stores: each partition restores only
	// the changelog after the offset its store reached.
	for _, p := range []*proc{sched, dial} {
		b, err := os.ReadFile(p.log)
		if err != nil {
			t.Fatal(err)
		}
		reused := bytes.Count(b, []byte("local store reused"))
		restored := 0
		for _, m := range restoredRe.FindAllSubmatch(b, -1) {
			n, _ := strconv.Atoi(string(m[1]))
			restored += n
		}
		// A store is wiped only when it cannot be trusted: none may be
		// after a kill -9. (A process killed again before it reopened its
		// stores reuses fewer than its partitions at that restart, which a
		// loaded machine makes likely; that loses nothing.)
		var wiped int
		for _, why := range []string{"local store corrupt", "holds no changelog offset", "local offset unreadable", "too long ago"} {
			wiped += bytes.Count(b, []byte(why))
		}
		t.Logf("%s: %d kills, %d partition stores reused, %d wiped, %d changelog records restored in all", p.name, kills[p.name], reused, wiped, restored)
		if wiped > 0 || (kills[p.name] > 0 && reused < parts) {
			t.Errorf("%s: %d partition stores reused and %d wiped after %d kills of %d partitions, want none wiped and at least one restart reusing every store",
				p.name, reused, wiped, kills[p.name], parts)
		}
	}
	r.check(t)
}

var restoredRe = regexp.MustCompile(`records_restored=(\d+)`)
