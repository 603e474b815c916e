package systemtest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/topology"
)

// On a three-broker cluster, the broker that leads every partition of
// ivr-calls, and none of the scheduler's table nor the group coordinator,
// is killed with SIGKILL while follow-ups fire, and restarted 8 s later.
// The scheduler's calls then fail to reach Kafka while its fired marks are
// written and its group commits: a tick whose calls were not acknowledged
// must not be committed by a later tick that fired nothing, or its calls
// are never published. Nothing is lost, nothing fires early, no follow-up
// is dialed under two call ids.
func TestClusterCallsLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("system test against an Apache Kafka cluster; skipped with -short")
	}
	cluster := kafkatest.StartClusterForTest(t, 3)
	brokers := cluster.Bootstrap()
	pfx, parts := prefix(t), 6
	topics := topology.NewTopics(pfx)
	calls, table := string(topics.Calls), string(topics.SchedulerTable())
	prov, sched, dial := startReplicated(t, brokers, pfx, parts)

	// The victim: a broker that does not coordinate the groups (the
	// brokers have one __consumer_offsets partition), made the leader of
	// every ivr-calls partition and of no partition of the table.
	coord, err := cluster.Partitions("__consumer_offsets")
	if err != nil || len(coord) != 1 {
		t.Fatalf("__consumer_offsets: %v %v", coord, err)
	}
	var victim int32 = -1
	for _, b := range cluster.Brokers() {
		if b.ID() != coord[0].Leader {
			victim = b.ID()
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leadOnly(ctx, t, cluster, victim, calls, table)
	t.Logf("broker %d leads every partition of %s and none of %s; broker %d coordinates the groups", victim, calls, table, coord[0].Leader)

	const window = 45 * time.Second
	begin := time.Now().Add(5 * time.Second)
	want := schedule(t, brokers, pfx, parts, spread(1500, 2, begin, window))
	t.Logf("scheduled %d follow-ups, due over %v", len(want), window)

	time.Sleep(time.Until(begin.Add(8 * time.Second))) // the test's schedule: mid-run
	killed := time.Now()
	cluster.Broker(victim).Kill()
	time.Sleep(time.Until(killed.Add(8 * time.Second))) // the test's schedule: down for 8 s while follow-ups fire
	if err := cluster.Broker(victim).Restart(ctx); err != nil {
		t.Fatalf("restart broker %d: %v", victim, err)
	}
	back := time.Now()
	if err := cluster.AwaitInSync(ctx); err != nil {
		t.Fatal(err)
	}
	r := prov.waitAll(t, want, begin.Add(window+2*time.Minute), sched, dial)
	t.Logf("lateness of the follow-ups due from the kill until the broker answered again: %s; due after that: %s",
		percentiles(r.latenessDue(want, killed, back)), percentiles(r.latenessDue(want, back, begin.Add(window))))
	r.check(t)
}

// leadOnly makes broker lead every partition of lead and none of avoid: it
// puts the broker first among each lead partition's replicas and last among
// each avoid partition's (a reassignment that moves no data), elects the
// preferred leaders, and waits until the leaders are so.
func leadOnly(ctx context.Context, t *testing.T, c *kafkatest.Cluster, broker int32, lead, avoid string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(c.Addrs(), kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: c.Addrs()}.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	states, err := c.Partitions(lead, avoid)
	if err != nil {
		t.Fatal(err)
	}
	order := map[string][][]int32{}
	elect := map[string][]int32{}
	for _, s := range states {
		others := slices.DeleteFunc(slices.Clone(s.Replicas), func(id int32) bool { return id == broker })
		replicas := append([]int32{broker}, others...)
		if s.Topic == avoid {
			replicas = append(others, broker)
		}
		order[s.Topic] = append(order[s.Topic], replicas) // states are ordered by partition
		elect[s.Topic] = append(elect[s.Topic], s.Partition)
	}
	for topic, assignment := range order {
		if err := admin.AlterPartitionReassignments(topic, assignment); err != nil {
			t.Fatalf("reorder the replicas of %s: %v", topic, err)
		}
	}
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		// Elect again until the reassignments have taken effect.
		if _, err := admin.ElectLeaders(sarama.PreferredElection, elect); err != nil {
			t.Logf("elect preferred leaders: %v", err)
		}
		states, err := c.Partitions(lead, avoid)
		done := err == nil
		for _, s := range states {
			if (s.Topic == lead) != (s.Leader == broker) {
				done = false
			}
		}
		if done {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("broker %d does not lead only %s: %+v (%v)", broker, lead, states, err)
		case <-ticker.C:
		}
	}
}

// startReplicated starts a scheduler and a dialer (static members, topics
// of three replicas, 6 s sessions) calling a webhook provider, and waits
// until both are ready.
func startReplicated(t *testing.T, brokers, pfx string, parts int) (prov *provider, sched, dial *proc) {
	t.Helper()
	prov = newProvider(t)
	common := func(id string, extra ...string) []string {
		return roleArgs(t, brokers, pfx, parts, append([]string{"--replication", "3", "--instance-id", id, "--session-timeout", "6s"}, extra...)...)
	}
	sched = start(t, "scheduler", append([]string{"scheduler"}, common("s1")...)...)
	dial = start(t, "dialer", append([]string{"dialer"}, common("d1", "--provider", "webhook", "--webhook-url", prov.url())...)...)
	sched.awaitReady(1, 2*time.Minute)
	dial.awaitReady(1, 2*time.Minute)
	return prov, sched, dial
}
