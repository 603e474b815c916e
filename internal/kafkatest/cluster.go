package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// clusterJVMArgs keep a cluster's JVMs small, so that three of them fit on a
// small test machine next to the processes under test. They come after
// defaultJVMArgs and before WithJVMArgs, which can override them.
var clusterJVMArgs = []string{"-Xms32m", "-Xmx256m"}

// clusterStartTimeout is a cluster's default WithStartTimeout: three JVMs
// starting at once on a loaded two-core machine took over 90 s.
const clusterStartTimeout = 3 * time.Minute

// Cluster is a KRaft cluster of several Kafka nodes on 127.0.0.1, each a
// broker and a controller in its own JVM (a Broker). Kill and Restart one
// node with its Broker's methods; the others keep serving as long as a
// majority of the controllers runs.
type Cluster struct {
	nodes []*Broker
}

// StartCluster starts a cluster of n nodes (n >= 1; 3 to survive the loss of
// one), node ids 1 to n, on free ports of 127.0.0.1, as Start does for one,
// with smaller heaps (clusterJVMArgs). Kafka's internal topics get n
// replicas; topics created without a replication factor get n too. It
// returns once every node answers (within 3 minutes unless
// WithStartTimeout says otherwise). Options apply to every node. Callers
// must Stop the cluster.
func StartCluster(ctx context.Context, n int, opts ...Option) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("kafkatest: cluster of %d nodes", n)
	}
	nodes, err := startNodes(ctx, n, append([]Option{WithJVMArgs(clusterJVMArgs...), WithStartTimeout(clusterStartTimeout)}, opts...))
	if err != nil {
		return nil, err
	}
	return &Cluster{nodes: nodes}, nil
}

// Brokers returns the nodes, ordered by id (Brokers()[i].ID() is i+1).
func (c *Cluster) Brokers() []*Broker { return slices.Clone(c.nodes) }

// Broker returns the node with the given id, or nil.
func (c *Cluster) Broker(id int32) *Broker {
	if id < 1 || int(id) > len(c.nodes) {
		return nil
	}
	return c.nodes[id-1]
}

// Addrs returns every node's host:port, running or not.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, b := range c.nodes {
		addrs[i] = b.Addr()
	}
	return addrs
}

// Bootstrap returns Addrs joined by commas, as KAFKA_BROKERS and the
// ivrsched --brokers flag take them.
func (c *Cluster) Bootstrap() string { return strings.Join(c.Addrs(), ",") }

// running returns the addresses of the nodes whose process runs.
func (c *Cluster) running() []string {
	var addrs []string
	for _, b := range c.nodes {
		if b.PID() != 0 {
			addrs = append(addrs, b.Addr())
		}
	}
	return addrs
}

// Stop stops every node at once (see Broker.Stop) and removes their data.
//
// A node whose controller quorum exited before it is killed without an
// error: its broker asks the controllers to approve its controlled
// shutdown and waits up to five minutes for a majority that is gone (a
// node slower to stop than the others, on a loaded machine). It is an
// error only while a majority of the nodes did not stop politely.
func (c *Cluster) Stop() error {
	killed := make([]bool, len(c.nodes))
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, b := range c.nodes {
		wg.Go(func() { killed[i], errs[i] = b.stop() })
	}
	wg.Wait()
	return errors.Join(stopErrors(killed, errs)...)
}

// stopErrors is each node's error from its stop: its kill (killed), unless
// a majority of the nodes stopped without error (then it waited for
// controllers that had exited), and its other error (errs).
func stopErrors(killed []bool, errs []error) []error {
	stopped := 0
	for i := range killed {
		if !killed[i] && errs[i] == nil {
			stopped++
		}
	}
	out := make([]error, len(errs))
	for i, err := range errs {
		out[i] = stopError(killed[i] && stopped <= len(killed)/2, err)
	}
	return out
}

// PartitionState is where one partition of a topic lives.
type PartitionState struct {
	Topic     string
	Partition int32
	Leader    int32   // node id; -1 while it has none
	Replicas  []int32 // node ids
	ISR       []int32 // in-sync replicas, node ids
}

// Partitions describes every partition of the given topics (of every topic
// when none is given), as the running nodes' metadata has it now, ordered by
// topic and partition.
func (c *Cluster) Partitions(topics ...string) ([]PartitionState, error) {
	admin, err := c.admin()
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if len(topics) == 0 {
		all, err := admin.ListTopics()
		if err != nil {
			return nil, fmt.Errorf("kafkatest: list topics: %w", err)
		}
		for name := range all {
			topics = append(topics, name)
		}
	}
	metas, err := admin.DescribeTopics(topics)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: describe topics: %w", err)
	}
	var states []PartitionState
	for _, m := range metas {
		if !errors.Is(m.Err, sarama.ErrNoError) {
			return nil, fmt.Errorf("kafkatest: describe topic %s: %w", m.Name, m.Err)
		}
		for _, p := range m.Partitions {
			states = append(states, PartitionState{Topic: m.Name, Partition: p.ID, Leader: p.Leader,
				Replicas: slices.Clone(p.Replicas), ISR: slices.Clone(p.Isr)})
		}
	}
	slices.SortFunc(states, func(a, b PartitionState) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return states, nil
}

// Leaders counts the partitions of the given topics (every topic when none
// is given) that each node leads.
func (c *Cluster) Leaders(topics ...string) (map[int32]int, error) {
	states, err := c.Partitions(topics...)
	if err != nil {
		return nil, err
	}
	led := map[int32]int{}
	for _, s := range states {
		if s.Leader >= 0 {
			led[s.Leader]++
		}
	}
	return led, nil
}

// AwaitInSync waits until every partition of the given topics (every topic
// when none is given) has a leader and all its replicas in sync, as after a
// restarted node caught up, or ctx ends.
func (c *Cluster) AwaitInSync(ctx context.Context, topics ...string) error {
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		states, err := c.Partitions(topics...)
		behind := 0
		for _, s := range states {
			if s.Leader < 0 || len(s.ISR) < len(s.Replicas) {
				behind++
			}
		}
		if err == nil && behind == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: %d partitions not in sync (last error: %v): %w", behind, err, ctx.Err())
		case <-ticker.C:
		}
	}
}

// admin returns an admin client of the running nodes.
func (c *Cluster) admin() (sarama.ClusterAdmin, error) {
	addrs := c.running()
	if len(addrs) == 0 {
		return nil, errors.New("kafkatest: no node of the cluster runs")
	}
	admin, err := newAdmin(addrs, "kafkatest-cluster")
	if err != nil {
		return nil, fmt.Errorf("kafkatest: connect to %s: %w", strings.Join(addrs, ","), err)
	}
	return admin, nil
}
