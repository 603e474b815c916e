package topology

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
)

// TombstoneRetention is how long a table topic keeps a tombstone (a deleted
// user: retention, or a Forget) before compaction may drop it
// (delete.retention.ms). A local store that has not caught up with its
// changelog for about this long is restored from the changelog instead of
// reused (localstore.Stores.MaxOffline), or it could bring a deleted user
// back.
const TombstoneRetention = 7 * 24 * time.Hour

// CompactionLag is the longest a table topic's record stays uncompacted
// (max.compaction.lag.ms of the topics ivrsched creates): a value that a
// later one or a tombstone replaced leaves the changelog within about this
// long, not only when its segment rolls (1 GiB or 7 days on Kafka's
// defaults). It bounds where an erased user's phone number can still be
// read, and what a new instance restores after many users were removed.
const CompactionLag = 24 * time.Hour

// MinInSyncReplicas is the min.insync.replicas of the topics ivrsched
// creates with this replication: replication-1, at least 1 (2 of 3
// replicas). Every producer waits for all in-sync replicas (acks=all), so
// an acknowledged write is on at least this many brokers, and one broker
// of three may be down (or lagging) while writes go on; with two down,
// writes fail and are retried (the processor restarts) rather than
// acknowledged by one broker alone.
func MinInSyncReplicas(replication int) int { return max(1, replication-1) }

// DialerLoopRetention keeps the dialer's loop topic (the answers of
// placements and the status callbacks) for a dialer that is down for days.
const DialerLoopRetention = 7 * 24 * time.Hour

// ErrTopicMismatch reports an existing topic that does not fit ivrsched.
var ErrTopicMismatch = errors.New("topic mismatch")

// TopicSpec is one topic ivrsched needs.
type TopicSpec struct {
	Name    string
	Compact bool          // a table topic: cleanup.policy=compact
	Retain  time.Duration // retention of a stream topic
	// BrokerTime makes the broker stamp each record with its own clock
	// (message.timestamp.type=LogAppendTime): the scheduler measures the
	// times a producer writes in a command against it.
	BrokerTime bool
	// Partitions of the topic; 0: kafkaclient.Kafka.Partitions (the
	// co-partitioned topics). The policy topic has one.
	Partitions int
}

// Specs lists every topic of the topology.
func (t Topics) Specs() []TopicSpec {
	const day = 24 * time.Hour
	return []TopicSpec{
		{Name: string(t.Onboarding), Retain: 7 * day, BrokerTime: true},
		{Name: string(t.Ticks), Retain: time.Hour},
		{Name: string(t.SchedulerLoop()), Retain: time.Hour}, // Goka checks it against its stream default; a restart rebuilds the timers anyway
		{Name: string(t.SchedulerTable()), Compact: true},
		{Name: string(t.Calls), Retain: 7 * day},
		{Name: string(t.Results), Retain: 7 * day},
		{Name: string(t.Events), Retain: 7 * day},
		{Name: string(t.DialerTable()), Compact: true},
		{Name: string(t.DialerLoop()), Retain: DialerLoopRetention},
		{Name: string(t.SchedulerDLQ), Retain: 30 * day},
		{Name: string(t.DialerDLQ), Retain: 30 * day},
		{Name: string(t.Policies), Compact: true, Partitions: 1}, // one key: the calling policy
		{Name: string(t.Suppressions), Compact: true},            // the do-not-call list, by keyed hash of the number
	}
}

// EnsureTopics creates the missing topics and checks the existing ones: every
// topic must have k.Partitions partitions (they are co-partitioned), and a
// table topic must be compacted.
func EnsureTopics(ctx context.Context, k kafkaclient.Kafka, specs []TopicSpec) error {
	client, err := k.Connect(ctx)
	if err != nil {
		return err
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return fmt.Errorf("cluster admin: %w", err)
	}
	defer admin.Close()
	names := make([]string, 0, len(specs))
	for _, s := range specs {
		names = append(names, s.Name)
	}
	existing, err := existingTopics(admin, names)
	if err != nil {
		return err
	}
	for _, s := range specs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if n, ok := existing[s.Name]; ok {
			if err := checkTopic(admin, s, n, s.partitions(k)); err != nil {
				return err
			}
			continue
		}
		cfg := map[string]*string{}
		set := func(key, v string) { cfg[key] = &v }
		set("min.insync.replicas", strconv.Itoa(MinInSyncReplicas(k.Replication)))
		if s.Compact {
			set("cleanup.policy", "compact")
			set("delete.retention.ms", strconv.FormatInt(TombstoneRetention.Milliseconds(), 10))
			set("max.compaction.lag.ms", strconv.FormatInt(CompactionLag.Milliseconds(), 10))
		} else {
			set("cleanup.policy", "delete")
			set("retention.ms", strconv.FormatInt(s.Retain.Milliseconds(), 10))
		}
		if s.BrokerTime {
			set("message.timestamp.type", "LogAppendTime")
		}
		err := admin.CreateTopic(s.Name, &sarama.TopicDetail{
			NumPartitions:     int32(s.partitions(k)),
			ReplicationFactor: int16(k.Replication),
			ConfigEntries:     cfg,
		}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", s.Name, err)
		}
	}
	return awaitTopics(ctx, client, names)
}

// awaitTopics waits until every broker that answers lists the topics in its
// metadata. Topic creation completes asynchronously and reaches each broker
// in its own time, and Goka's checks may ask any of them; a topic that
// another instance has just created may be known to one broker only.
// existingTopics returns the partition count of each of names that exists,
// from one metadata request for those topics (never auto-creating one).
// Listing the cluster's topics instead cost a description of every topic's
// configuration, whatever the cluster holds, at every start.
func existingTopics(admin sarama.ClusterAdmin, names []string) (map[string]int, error) {
	md, err := admin.DescribeTopics(names)
	if err != nil {
		return nil, fmt.Errorf("describe topics: %w", err)
	}
	out := make(map[string]int, len(md))
	for _, t := range md {
		switch {
		case errors.Is(t.Err, sarama.ErrUnknownTopicOrPartition):
		case errors.Is(t.Err, sarama.ErrNoError) || len(t.Partitions) > 0: // a leader may still be on its way
			out[t.Name] = len(t.Partitions)
		default:
			return nil, fmt.Errorf("describe topic %s: %w", t.Name, t.Err)
		}
	}
	return out, nil
}

func awaitTopics(ctx context.Context, client sarama.Client, names []string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		missing, err := unknownTopics(client, names)
		if err == nil && len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topics %v not known to every broker after 30s (last error: %v)", missing, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// unknownTopics asks each broker for the topics' metadata and returns those
// that a broker does not list with their partitions. A broker that does not
// answer (one of several may be down) is not asked; none answering is an
// error.
func unknownTopics(client sarama.Client, names []string) ([]string, error) {
	unknown := map[string]bool{}
	var errs []error
	for _, b := range client.Brokers() {
		if err := b.Open(client.Config()); err != nil && !errors.Is(err, sarama.ErrAlreadyConnected) {
			errs = append(errs, err)
			continue
		}
		resp, err := b.GetMetadata(sarama.NewMetadataRequest(client.Config().Version, names))
		if err != nil {
			errs = append(errs, fmt.Errorf("metadata from %s: %w", b.Addr(), err))
			continue
		}
		for _, name := range names {
			i := slices.IndexFunc(resp.Topics, func(t *sarama.TopicMetadata) bool { return t.Name == name })
			if i < 0 || !errors.Is(resp.Topics[i].Err, sarama.ErrNoError) || len(resp.Topics[i].Partitions) == 0 {
				unknown[name] = true
			}
		}
	}
	if len(errs) == len(client.Brokers()) {
		return nil, fmt.Errorf("no broker answered: %w", errors.Join(errs...))
	}
	return slices.Sorted(maps.Keys(unknown)), nil
}

func (s TopicSpec) partitions(k kafkaclient.Kafka) int {
	if s.Partitions > 0 {
		return s.Partitions
	}
	return k.Partitions
}

func checkTopic(admin sarama.ClusterAdmin, s TopicSpec, has, partitions int) error {
	if has != partitions {
		return fmt.Errorf("%w: %s has %d partitions, want %d (co-partitioned topics must match; use --partitions %d or recreate the topic)",
			ErrTopicMismatch, s.Name, has, partitions, has)
	}
	if !s.Compact {
		return nil
	}
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: s.Name, ConfigNames: []string{"cleanup.policy", "delete.retention.ms"}})
	if err != nil {
		return fmt.Errorf("describe topic %s: %w", s.Name, err)
	}
	for _, e := range entries {
		switch e.Name {
		case "cleanup.policy":
			if !strings.Contains(e.Value, "compact") {
				return fmt.Errorf("%w: table topic %s has cleanup.policy=%s, want compact", ErrTopicMismatch, s.Name, e.Value)
			}
		case "delete.retention.ms":
			// Tables created before ivrsched wrote tombstones: raise it.
			if ms, err := strconv.ParseInt(e.Value, 10, 64); err == nil && ms < TombstoneRetention.Milliseconds() {
				v := strconv.FormatInt(TombstoneRetention.Milliseconds(), 10)
				err := admin.IncrementalAlterConfig(sarama.TopicResource, s.Name, map[string]sarama.IncrementalAlterConfigsEntry{
					"delete.retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &v}}, false)
				if err != nil {
					return fmt.Errorf("table topic %s: raise delete.retention.ms from %d to %s: %w", s.Name, ms, v, err)
				}
			}
		}
	}
	return nil
}
