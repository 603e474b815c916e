package topology

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
)

// Kafka is the client configuration every component of ivrsched shares.
type Kafka struct {
	Brokers  []string
	ClientID string
	// Partitions of every topic ivrsched creates. Inputs, ticks and table
	// topics are co-partitioned, so they must all have this count.
	Partitions int
	// Replication of every topic ivrsched creates.
	Replication int
	// FlushFrequency is how long the producer may hold a message to batch it.
	// It bounds the latency of each hop.
	FlushFrequency time.Duration
	// FetchWait is how long the broker may hold a consumer's fetch until
	// 32 KiB are there to return: under load fetches return fuller, for
	// fewer broker requests; idle, each hop waits up to FetchWait more.
	// 0 returns a fetch as soon as anything is there.
	FetchWait time.Duration
	// BackgroundFetchWait is FetchWait for the consumers whose records are
	// not on a fire's path: the dialer's group (a call's placement, its
	// answers, the scheduler's events) and the views (the calling
	// policies). Idle, a consumer fetches once per wait: at 1 ms each one
	// asks the broker a thousand times a second whatever the rate. 0: FetchWait.
	BackgroundFetchWait time.Duration
	// DialTimeout bounds connecting to a broker.
	DialTimeout time.Duration
	// InstanceID, if set, makes this process a static member of its consumer
	// groups (group.instance.id): restarted with the same id, it gets its
	// partitions back at once instead of after a rebalance. Unique per process.
	InstanceID string
	// SessionTimeout is how long the group waits for a silent member
	// (crashed without leaving) before it moves the member's partitions.
	SessionTimeout time.Duration
	// Security is TLS and SASL to the brokers; the zero value is
	// plaintext without authentication.
	Security Security
	// MemberData is the user data this process's consumer group members
	// carry in their metadata (the admin API's announcement, package
	// admin): `ivrsched show` and `upcoming` find the instances and the
	// partitions each owns by describing the group.
	MemberData []byte
}

// ErrConfig reports an invalid configuration.
var ErrConfig = errors.New("invalid configuration")

// Validate checks the configuration.
func (k Kafka) Validate() error {
	switch {
	case len(k.Brokers) == 0:
		return fmt.Errorf("%w: no brokers (want host:port[,host:port])", ErrConfig)
	case k.Partitions < 1:
		return fmt.Errorf("%w: partitions %d (want >= 1)", ErrConfig, k.Partitions)
	case k.Replication < 1:
		return fmt.Errorf("%w: replication %d (want >= 1)", ErrConfig, k.Replication)
	case k.FlushFrequency < 0:
		return fmt.Errorf("%w: flush frequency %v (want >= 0)", ErrConfig, k.FlushFrequency)
	case !ValidFetchWait(k.FetchWait):
		return fmt.Errorf("%w: fetch wait %v (want 0 or 1ms to 1s)", ErrConfig, k.FetchWait)
	case !ValidFetchWait(k.BackgroundFetchWait):
		return fmt.Errorf("%w: background fetch wait %v (want 0 or 1ms to 1s)", ErrConfig, k.BackgroundFetchWait)
	case k.SessionTimeout != 0 && (k.SessionTimeout < time.Second || k.SessionTimeout > 5*time.Minute):
		return fmt.Errorf("%w: session timeout %v (want 1s to 5m)", ErrConfig, k.SessionTimeout)
	}
	for _, b := range k.Brokers {
		if _, _, err := splitHostPort(b); err != nil {
			return fmt.Errorf("%w: broker %q: %w", ErrConfig, b, err)
		}
	}
	return k.Security.Validate()
}

func splitHostPort(addr string) (string, int, error) {
	i := strings.LastIndexByte(addr, ':')
	if i <= 0 {
		return "", 0, errors.New("want host:port")
	}
	port, err := strconv.Atoi(addr[i+1:])
	if err != nil || port < 1 || port > 65535 {
		return "", 0, errors.New("want host:port with a port 1-65535")
	}
	return addr[:i], port, nil
}

// Sarama returns a new Sarama configuration. Each call returns a fresh copy,
// since Goka's builders modify the configuration they are given.
func (k Kafka) Sarama() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_6_0_0
	if k.ClientID != "" {
		c.ClientID = k.ClientID
	}
	if k.DialTimeout > 0 {
		c.Net.DialTimeout = k.DialTimeout
		c.Metadata.Retry.Max = 2
	}
	c.Consumer.Return.Errors = true
	c.Consumer.MaxProcessingTime = time.Second
	if k.FetchWait > 0 {
		c.Consumer.Fetch.Min = 32 << 10
		c.Consumer.MaxWaitTime = k.FetchWait
	}
	// Commands produced before the first start must not be lost.
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{goka.CopartitioningStrategy}
	c.Consumer.Group.InstanceId = k.InstanceID
	c.Consumer.Group.Member.UserData = k.MemberData
	// Back soon after a broker or a partition leader is: a group join that
	// failed (the coordinator restarting or moving) is tried again every
	// 250 ms for 10 s, not every 2 s for 8 s, and a partition consumer
	// whose leader went away looks for the new one every 250 ms, not 2 s.
	c.Consumer.Group.Rebalance.Retry.Backoff = 250 * time.Millisecond
	c.Consumer.Group.Rebalance.Retry.Max = 40
	c.Consumer.Retry.Backoff = 250 * time.Millisecond
	if k.SessionTimeout > 0 {
		c.Consumer.Group.Session.Timeout = k.SessionTimeout
		// Members learn of a rebalance at their next heartbeat: keep it short.
		c.Consumer.Group.Heartbeat.Interval = k.SessionTimeout / 10
	}
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Compression = sarama.CompressionNone
	c.Producer.Flush.Frequency = k.FlushFrequency
	c.Producer.Flush.Bytes = 64 * 1024
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.Retry.Max = 10
	// One produce request in flight per broker: under load the next batch
	// grows while the previous one is acknowledged (fewer, larger requests
	// for the broker), while an idle producer still sends after
	// FlushFrequency. It does not keep a partition's records in order
	// across a retry: Sarama writes its next request while one is
	// unanswered, so a refused batch may be written after the next one.
	// The producers ivrsched builds keep each key's writes in order
	// themselves (ProducerBuilder, keyorder.go).
	c.Net.MaxOpenRequests = 1
	// Not idempotent: with Sarama 1.46.3's idempotent producer, records
	// it reported written were missing from the topic after a partition
	// leader was killed (4 of 58,000 in one of three runs, next to 1,296
	// OUT_OF_ORDER_SEQUENCE_NUMBER errors; docs/design.md). Without it a
	// retry may write a record twice, which the call ids absorb.
	c.Producer.Idempotent = false
	c.Producer.Partitioner = sarama.NewCustomHashPartitioner(Murmur2())
	k.Security.apply(c)
	return c
}

// ProcessorOptions wires a Goka processor to this cluster: the Java-compatible
// hasher, explicit Sarama configs, and topics that must already exist.
func (k Kafka) ProcessorOptions() []goka.ProcessorOption {
	return []goka.ProcessorOption{
		goka.WithHasher(Murmur2()),
		goka.WithProducerBuilder(k.ProducerBuilder),
		goka.WithConsumerGroupBuilder(k.ConsumerGroupBuilder),
		goka.WithConsumerSaramaBuilder(k.consumerBuilder),
		goka.WithTopicManagerBuilder(k.topicManagerBuilder),
	}
}

// EmitterOptions wires Goka emitters to this cluster. The emitters built
// with one call's options keep each key's order together (EmitterProducers).
func (k Kafka) EmitterOptions() []goka.EmitterOption {
	return []goka.EmitterOption{
		goka.WithEmitterHasher(Murmur2()),
		goka.WithEmitterProducerBuilder(k.EmitterProducers()),
		goka.WithEmitterTopicManagerBuilder(k.topicManagerBuilder),
	}
}

// ValidFetchWait is whether d can be a fetch wait: 0 (answer at once) or
// 1 ms to 1 s (Kafka counts it in whole milliseconds).
func ValidFetchWait(d time.Duration) bool {
	return d == 0 || (d >= time.Millisecond && d <= time.Second)
}

// Background is k for the consumers whose records are not on a fire's
// path (BackgroundFetchWait).
func (k Kafka) Background() Kafka {
	if k.BackgroundFetchWait > 0 {
		k.FetchWait = k.BackgroundFetchWait
	}
	return k
}

// ViewOptions wires a Goka view to this cluster; views fetch with
// BackgroundFetchWait.
func (k Kafka) ViewOptions() []goka.ViewOption {
	return []goka.ViewOption{
		goka.WithViewHasher(Murmur2()),
		goka.WithViewConsumerSaramaBuilder(k.Background().consumerBuilder),
		goka.WithViewTopicManagerBuilder(k.topicManagerBuilder),
	}
}

// The builders give every client a config of its own: Goka's builders
// modify the config they are given.

// ProducerBuilder builds the producers of ivrsched's processors. They
// write each key's records in the order they were emitted, also across
// Sarama's retries: a write waits until its key's write before it is
// acknowledged. Once a write fails, the later writes of its key fail too,
// until the producer is closed: the processor fails and its input replays
// with a new producer, so a topic never has a later value of a key after
// an earlier one that failed (keyorder.go).
func (k Kafka) ProducerBuilder(brokers []string, clientID string, hasher func() hash.Hash32) (goka.Producer, error) {
	p, err := goka.ProducerBuilderWithConfig(k.Sarama())(brokers, clientID, hasher)
	if err != nil {
		return nil, err
	}
	return newKeyOrder(p, newKeyOrders(true)), nil
}

// EmitterProducers returns a builder of producers for ivrsched's emitters:
// as ProducerBuilder's, but together they keep each key's order (a reviving
// emitter's new producer writes a key once the old one's write of it is
// acknowledged), and a failed write fails only the writes of its key held
// behind it: the key is written again after that, for an emitter outlives
// the failure, and its callers got the errors.
func (k Kafka) EmitterProducers() goka.ProducerBuilder {
	orders := newKeyOrders(false)
	return func(brokers []string, clientID string, hasher func() hash.Hash32) (goka.Producer, error) {
		p, err := goka.ProducerBuilderWithConfig(k.Sarama())(brokers, clientID, hasher)
		if err != nil {
			return nil, err
		}
		return newKeyOrder(p, orders), nil
	}
}

// ConsumerGroupBuilder builds the consumer groups of ivrsched's processors.
// They rejoin their group as soon as a session ends (rejoining).
func (k Kafka) ConsumerGroupBuilder(brokers []string, group, clientID string) (sarama.ConsumerGroup, error) {
	cg, err := goka.ConsumerGroupBuilderWithConfig(k.Sarama())(brokers, group, clientID)
	if err != nil {
		return nil, err
	}
	return rejoining{ConsumerGroup: cg, pause: sleepCtx}, nil
}

func (k Kafka) consumerBuilder(brokers []string, clientID string) (sarama.Consumer, error) {
	return goka.SaramaConsumerBuilderWithConfig(k.Sarama())(brokers, clientID)
}

func (k Kafka) topicManagerBuilder(brokers []string) (goka.TopicManager, error) {
	return goka.TopicManagerBuilderWithConfig(k.Sarama(), k.topicManagerConfig())(brokers)
}

// LoopRetention makes a processor's topic manager expect its loop topic
// with this retention (Goka checks the loop against its stream default).
func (k Kafka) LoopRetention(d time.Duration) goka.ProcessorOption {
	return goka.WithTopicManagerBuilder(func(brokers []string) (goka.TopicManager, error) {
		tm := k.topicManagerConfig()
		tm.Stream.Retention = d
		return goka.TopicManagerBuilderWithConfig(k.Sarama(), tm)(brokers)
	})
}

// ivrsched creates its topics itself (EnsureTopics), so Goka only checks.
func (k Kafka) topicManagerConfig() *goka.TopicManagerConfig {
	tm := goka.NewTopicManagerConfig()
	tm.Table.Replication = k.Replication
	tm.Stream.Replication = k.Replication
	tm.NoCreate = true
	tm.MismatchBehavior = goka.TMConfigMismatchBehaviorFail
	return tm
}

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
// creates: Replication-1, at least 1 (2 of 3 replicas). Every producer
// waits for all in-sync replicas (acks=all), so an acknowledged write is on
// at least this many brokers, and one broker of three may be down (or
// lagging) while writes go on; with two down, writes fail and are retried
// (the processor restarts) rather than acknowledged by one broker alone.
func (k Kafka) MinInSyncReplicas() int { return max(1, k.Replication-1) }

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
	// Partitions of the topic; 0: Kafka.Partitions (the co-partitioned
	// topics). The policy topic has one.
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
	}
}

// ErrUnreachable reports brokers that did not answer within the dial timeout.
var ErrUnreachable = errors.New("brokers not reachable")

// Connect returns a client of the cluster, or ErrUnreachable naming the
// brokers if none answered within k.DialTimeout (10 s if unset), or
// ErrAuthentication if they refused the SASL credentials.
func (k Kafka) Connect(ctx context.Context) (sarama.Client, error) {
	timeout := k.DialTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	type result struct {
		c   sarama.Client
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := sarama.NewClient(k.Brokers, k.Sarama())
		done <- result{c, err}
	}()
	fail := func(why error) error {
		go func() { // close a client that arrives late
			if r := <-done; r.err == nil {
				r.c.Close()
			}
		}()
		return why
	}
	select {
	case r := <-done:
		if r.err != nil {
			if err := k.Security.authError(strings.Join(k.Brokers, ","), r.err); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %s: %w%s", ErrUnreachable, strings.Join(k.Brokers, ","), r.err, k.Security.hint(r.err))
		}
		return r.c, nil
	case <-time.After(timeout):
		return nil, fail(fmt.Errorf("%w: %s did not answer within %v", ErrUnreachable, strings.Join(k.Brokers, ","), timeout))
	case <-ctx.Done():
		return nil, fail(ctx.Err())
	}
}

// EnsureTopics creates the missing topics and checks the existing ones: every
// topic must have k.Partitions partitions (they are co-partitioned), and a
// table topic must be compacted.
func EnsureTopics(ctx context.Context, k Kafka, specs []TopicSpec) error {
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
		set("min.insync.replicas", strconv.Itoa(k.MinInSyncReplicas()))
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

func (s TopicSpec) partitions(k Kafka) int {
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
