package systemtest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/topology"
)

// On a three-broker cluster, with topics of three replicas and
// min.insync.replicas=2, the broker that leads most of ivrsched's partitions
// is killed with SIGKILL while follow-ups fire, and restarted 8 s later.
// Nothing is lost, nothing fires early, no follow-up is dialed under two
// call ids. Beside them ivrsched's producer (kafkaclient.Kafka.ProducerBuilder)
// writes numbered records through the kill: every record the brokers
// acknowledged is on its topic afterwards.
func TestClusterBrokerKill(t *testing.T) {
	if testing.Short() {
		t.Skip("system test against an Apache Kafka cluster; skipped with -short")
	}
	began := time.Now()
	cluster := kafkatest.StartClusterForTest(t, 3)
	t.Logf("three-broker cluster started in %v", time.Since(began).Round(time.Millisecond))
	brokers := cluster.Bootstrap()
	pfx, parts := prefix(t), 6
	topics := topology.NewTopics(pfx)
	var names []string
	for _, s := range topics.Specs() {
		names = append(names, s.Name)
	}
	prov, sched, dial := startReplicated(t, brokers, pfx, parts)
	checkReplicated(t, cluster, names, 3, "2")

	acks := startAckWriter(t, kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: cluster.Addrs(), Partitions: parts, Replication: 3, FlushFrequency: time.Millisecond}, pfx+"acks")

	const window = 45 * time.Second
	begin := time.Now().Add(5 * time.Second)
	want := schedule(t, brokers, pfx, parts, spread(1500, 2, begin, window))
	t.Logf("scheduled %d follow-ups, due over %v", len(want), window)

	time.Sleep(time.Until(begin.Add(8 * time.Second))) // the test's schedule: mid-run
	// The victim leads most partitions. __consumer_offsets counts too: its
	// leader coordinates the groups (the brokers have one such partition),
	// so in a tie the coordinator goes down with its partitions.
	led, err := cluster.Leaders(append(names, "__consumer_offsets")...)
	if err != nil {
		t.Fatal(err)
	}
	victim := slices.MaxFunc(slices.Sorted(maps.Keys(led)), func(a, b int32) int { return led[a] - led[b] })
	killed := time.Now()
	cluster.Broker(victim).Kill()
	t.Logf("partitions led per broker (ivrsched's and __consumer_offsets): %v; killed broker %d", led, victim)

	time.Sleep(time.Until(killed.Add(8 * time.Second))) // the test's schedule: down for 8 s while follow-ups fire
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	restarted := time.Now()
	if err := cluster.Broker(victim).Restart(ctx); err != nil {
		t.Fatalf("restart broker %d: %v", victim, err)
	}
	back := time.Now()
	if err := cluster.AwaitInSync(ctx, names...); err != nil {
		t.Fatal(err)
	}
	t.Logf("broker %d restarted %v after the kill, answering %v later, all replicas in sync %v after that", victim,
		restarted.Sub(killed).Round(time.Millisecond), back.Sub(restarted).Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
	acks.halt() // it wrote through the kill and the restart

	r := prov.waitAll(t, want, begin.Add(window+2*time.Minute), sched, dial)
	t.Logf("lateness of the follow-ups due from the kill until the broker answered again: %s; due after that: %s",
		percentiles(r.latenessDue(want, killed, back)), percentiles(r.latenessDue(want, back, begin.Add(window))))
	for _, p := range []*proc{sched, dial} {
		b, err := os.ReadFile(p.log)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d processor restarts, %d partitions reopened (a new group session reopens them all), %d produce errors %q",
			p.name, bytes.Count(b, []byte("processor failed")), bytes.Count(b, []byte("local store reused")),
			bytes.Count(b, []byte(outOfOrder)), outOfOrder)
	}
	r.check(t)
	acks.check(t, brokers)

	// Logged, not asserted: a dialer whose result failed to reach Kafka
	// after its table write did replays the call as a repeat and writes no
	// result for it.
	results := map[string]bool{}
	for _, rec := range readTopic(t, brokers, string(topics.Results)) {
		res := &pb.CallResult{}
		if err := proto.Unmarshal(rec.Value, res); err != nil {
			t.Fatal(err)
		}
		results[res.GetCallId()] = true
	}
	prov.mu.Lock()
	noResult := map[string]bool{}
	for _, q := range prov.reqs {
		if !results[q.key] {
			noResult[q.key] = true
		}
	}
	prov.mu.Unlock()
	t.Logf("calls placed without a result on %s: %d", topics.Results, len(noResult))
}

// ackWriter writes numbered records with ivrsched's producer, about 2,000
// a second, and remembers which the brokers acknowledged.
type ackWriter struct {
	topic  string
	stop   chan struct{}
	once   sync.Once
	done   chan struct{}
	mu     sync.Mutex
	acked  map[string]bool
	failed int
	err    error // the last failure
}

func startAckWriter(t *testing.T, k kafkaclient.Kafka, topic string) *ackWriter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := topology.EnsureTopics(ctx, k, []topology.TopicSpec{{Name: topic, Retain: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	p, err := k.ProducerBuilder(k.Brokers, "ack-writer", topology.Murmur2())
	if err != nil {
		t.Fatal(err)
	}
	w := &ackWriter{topic: topic, stop: make(chan struct{}), done: make(chan struct{}), acked: map[string]bool{}}
	go func() {
		defer close(w.done)
		defer p.Close() // waits for the answers of what was sent
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			for j := range 2 {
				v := fmt.Sprintf("%08d-%d", i, j)
				p.Emit(topic, "k"+v[4:8], []byte(v)).Then(func(err error) {
					w.mu.Lock()
					defer w.mu.Unlock()
					if err != nil {
						w.failed, w.err = w.failed+1, err
						return
					}
					w.acked[v] = true
				})
			}
		}
	}()
	t.Cleanup(w.halt)
	return w
}

// halt stops writing and waits for the answers of what was sent.
func (w *ackWriter) halt() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

// check stops the writer and fails t unless every acknowledged record is
// on the topic.
func (w *ackWriter) check(t *testing.T, brokers string) {
	t.Helper()
	w.halt()
	on := map[string]int{}
	recs := readTopic(t, brokers, w.topic)
	for _, rec := range recs {
		on[string(rec.Value)]++
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var missing []string
	for v := range w.acked {
		if on[v] == 0 {
			missing = append(missing, v)
		}
	}
	twice := 0
	for _, n := range on {
		if n > 1 {
			twice++
		}
	}
	t.Logf("%s: %d records acknowledged, %d failed (last: %v), %d on the topic, %d of them twice, %d acknowledged but missing",
		w.topic, len(w.acked), w.failed, w.err, len(recs), twice, len(missing))
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Fatalf("%d acknowledged records missing from %s, e.g. %s", len(missing), w.topic, missing[0])
	}
}

// outOfOrder is how the brokers refuse a batch of an idempotent producer
// whose sequence numbers they did not expect (ivrsched's producers are not
// idempotent: there should be none).
const outOfOrder = "out of order sequence number"

// checkReplicated fails t unless every topic has the given replicas on every
// partition and min.insync.replicas minISR.
func checkReplicated(t *testing.T, c *kafkatest.Cluster, topics []string, replicas int, minISR string) {
	t.Helper()
	states, err := c.Partitions(topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if len(s.Replicas) != replicas {
			t.Fatalf("%s/%d has replicas %v, want %d", s.Topic, s.Partition, s.Replicas, replicas)
		}
	}
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: c.Addrs()}
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, topic := range topics {
		entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"min.insync.replicas"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Value != minISR {
			t.Fatalf("%s: min.insync.replicas %+v, want %s", topic, entries, minISR)
		}
	}
}

// readTopic reads every partition of topic from its start to its end.
func readTopic(t *testing.T, brokers, topic string) []*kgo.Record {
	t.Helper()
	addrs := strings.Split(brokers, ",")
	ends := endOffsets(t, brokers, topic)
	offsets := map[int32]kgo.Offset{}
	for p, end := range ends {
		if end > 0 {
			offsets[p] = kgo.NewOffset().AtStart()
		} else {
			delete(ends, p)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var records []*kgo.Record
	for len(ends) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := fetches.Err(); err != nil {
			t.Fatalf("read %s: %v (%d partitions not read to their end)", topic, err, len(ends))
		}
		fetches.EachRecord(func(r *kgo.Record) {
			records = append(records, r)
			if r.Offset+1 >= ends[r.Partition] {
				delete(ends, r.Partition)
			}
		})
	}
	return records
}
