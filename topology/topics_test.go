package topology_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// Topics with three replicas get min.insync.replicas=2: with acks=all a
// write is on two brokers before it counts, and one broker may be down.
func TestEnsureTopicsSetsMinInSyncReplicas(t *testing.T) {
	for replication, want := range map[int]int{1: 1, 2: 1, 3: 2, 5: 4} {
		if got := topology.MinInSyncReplicas(replication); got != want {
			t.Errorf("replication %d: min.insync.replicas %d, want %d", replication, got, want)
		}
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: cluster.ListenAddrs(), Partitions: 2, Replication: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	specs := topology.NewTopics("").Specs()
	if err := topology.EnsureTopics(ctx, k, specs); err != nil {
		t.Fatal(err)
	}
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, s := range specs {
		entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: s.Name, ConfigNames: []string{"min.insync.replicas"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Value != "2" {
			t.Errorf("%s: min.insync.replicas %+v, want 2", s.Name, entries)
		}
	}
}

// A second start finds its topics from a metadata request for them alone
// (not a description of every topic of the cluster) and still refuses one
// whose partitions or cleanup policy differ.
func TestEnsureTopicsChecksExistingTopics(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: cluster.ListenAddrs(), Partitions: 2, Replication: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	specs := topology.NewTopics("a-").Specs()
	for range 2 {
		if err := topology.EnsureTopics(ctx, k, specs); err != nil {
			t.Fatal(err)
		}
	}
	wider := k
	wider.Partitions = 3
	if err := topology.EnsureTopics(ctx, wider, specs); !errors.Is(err, topology.ErrTopicMismatch) {
		t.Errorf("3 partitions against 2: %v, want ErrTopicMismatch", err)
	}
	// A table topic that exists without compaction.
	table := []topology.TopicSpec{{Name: "b-table", Retain: time.Hour}}
	if err := topology.EnsureTopics(ctx, k, table); err != nil {
		t.Fatal(err)
	}
	table[0].Compact = true
	if err := topology.EnsureTopics(ctx, k, table); !errors.Is(err, topology.ErrTopicMismatch) {
		t.Errorf("a table topic with cleanup.policy=delete: %v, want ErrTopicMismatch", err)
	}
}
