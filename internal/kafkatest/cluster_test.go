package kafkatest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// A three-node cluster keeps accepting acks=all writes with min.insync.replicas=2
// while its busiest node is killed, and the node catches up after Restart.
func TestClusterSurvivesKill(t *testing.T) {
	began := time.Now()
	c := StartClusterForTest(t, 3)
	t.Logf("StartCluster took %v", time.Since(began).Round(time.Millisecond))
	if got := len(c.Brokers()); got != 3 {
		t.Fatalf("%d nodes, want 3", got)
	}
	brokers := c.Addrs()
	topic := uniqueTopic(t)
	minISR := "2"
	createTopicWith(t, brokers, topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 3,
		ConfigEntries: map[string]*string{"min.insync.replicas": &minISR}})
	states, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if len(s.Replicas) != 3 || len(s.ISR) != 3 {
			t.Fatalf("partition %d: replicas %v, ISR %v; want 3 of each", s.Partition, s.Replicas, s.ISR)
		}
	}
	victim := states[0].Leader
	produce(t, brokers, topic, 0, "before kill", 0)

	c.Broker(victim).Kill()
	began = time.Now()
	cfg := saramaConfig()
	cfg.Producer.Retry.Max = 60 // until the controller fences the dead node and moves its leaderships
	cfg.Producer.Retry.Backoff = 250 * time.Millisecond
	produceWith(t, brokers, cfg, topic, 0, "while node down", 1)
	t.Logf("node %d killed; the next acks=all write to its partition took %v", victim, time.Since(began).Round(time.Millisecond))
	led, err := c.Leaders(topic)
	if err != nil {
		t.Fatal(err)
	}
	if led[victim] != 0 {
		t.Fatalf("killed node %d still leads %d partitions: %v", victim, led[victim], led)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began = time.Now()
	if err := c.Broker(victim).Restart(ctx); err != nil {
		t.Fatalf("restart node %d: %v", victim, err)
	}
	if err := c.AwaitInSync(ctx, topic); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %d restarted and back in sync after %v", victim, time.Since(began).Round(time.Millisecond))
	want := []string{"before kill", "while node down"}
	if got := readAll(t, brokers, topic, 0); !slices.Equal(got, want) {
		t.Fatalf("partition 0 holds %q, want %q", got, want)
	}
	began = time.Now()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop took %v", time.Since(began).Round(time.Millisecond))
}
