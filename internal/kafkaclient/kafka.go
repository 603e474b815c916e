package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"

	"github.com/ivrsched/ivrsched/codec"
)

// Kafka is the client configuration every component of ivrsched shares.
type Kafka struct {
	Brokers  []string
	ClientID string
	// Hasher places each key on a partition, for every producer, processor,
	// view and emitter built from this configuration: topology.Murmur2 (the
	// Java client's placement), which every instance and client must share.
	// Taken here so that this package needs nothing of the topology.
	Hasher func() hash.Hash32
	// Partitions of every topic ivrsched creates. Inputs, ticks and table
	// topics are co-partitioned, so they must all have this count.
	Partitions int
	// Replication of every topic ivrsched creates.
	Replication int
	// FlushFrequency is how long the producer may hold a message to batch it.
	// It bounds the latency of each hop.
	FlushFrequency time.Duration
	// FetchWait is how long the broker may hold a consumer's fetch while
	// none of its partitions has a record: every consumer fetches at
	// least one byte (Fetch.Min 1), so the broker answers as soon as a
	// record arrives on any partition the fetch covers, and a long wait
	// costs no latency; idle, each consumer asks once per FetchWait.
	// 0: DefaultFetchWait.
	FetchWait time.Duration
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
	case k.Hasher == nil:
		return fmt.Errorf("%w: no hasher (want topology.Murmur2)", ErrConfig)
	case k.Partitions < 1:
		return fmt.Errorf("%w: partitions %d (want >= 1)", ErrConfig, k.Partitions)
	case k.Replication < 1:
		return fmt.Errorf("%w: replication %d (want >= 1)", ErrConfig, k.Replication)
	case k.FlushFrequency < 0:
		return fmt.Errorf("%w: flush frequency %v (want >= 0)", ErrConfig, k.FlushFrequency)
	case !ValidFetchWait(k.FetchWait):
		return fmt.Errorf("%w: fetch wait %v (want 0 or 1ms to 1s)", ErrConfig, k.FetchWait)
	case k.SessionTimeout != 0 && 2*k.fetchWait() > k.SessionTimeout:
		// A fetch holds the connection its group's heartbeats share.
		return fmt.Errorf("%w: fetch wait %v with session timeout %v (want at most half the session timeout)", ErrConfig, k.fetchWait(), k.SessionTimeout)
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
	// A fetch returns once any partition it covers has a record, else
	// after MaxWaitTime: fires are not held back, and idle consumers ask
	// rarely (TestFetchReturnsWhenAnyPartitionHasARecord).
	c.Consumer.Fetch.Min = 1
	c.Consumer.MaxWaitTime = k.fetchWait()
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
	c.Producer.Retry.BackoffFunc = retryBackoff
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
	c.Producer.Partitioner = sarama.NewCustomHashPartitioner(k.Hasher)
	k.Security.apply(c)
	return c
}

// retryBackoff is how long a producer waits before its retries-th retry of
// a batch: not at all before the first, 100 ms (Sarama's default) before
// each later one. A broker closes a connection that has been idle for its
// connections.max.idle.ms (10 minutes by default), and a producer learns
// it only when its next request fails: after an idle stretch the first
// fire's tick and its call would each wait a backoff for nothing
// (TestFirstFireAfterAnIdleStretch). A retry that fails again, as when a
// leader is down, waits as before.
func retryBackoff(retries, _ int) time.Duration {
	if retries <= 1 {
		return 0
	}
	return 100 * time.Millisecond
}

// ValueBound is the largest value a producer configured as c writes in
// one record keyed by an id of the contract (at most codec.MaxIDBytes):
// Producer.MaxMessageBytes less the key and a record's framing. It bounds
// a user's value in a processor's table, and each dead letter.
func ValueBound(c *sarama.Config) int {
	return codec.ValueBound(c.Producer.MaxMessageBytes, codec.MaxIDBytes)
}

// ProcessorOptions wires a Goka processor to this cluster: its Hasher,
// explicit Sarama configs, and topics that must already exist.
func (k Kafka) ProcessorOptions() []goka.ProcessorOption {
	return []goka.ProcessorOption{
		goka.WithHasher(k.Hasher),
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
		goka.WithEmitterHasher(k.Hasher),
		goka.WithEmitterProducerBuilder(k.EmitterProducers()),
		goka.WithEmitterTopicManagerBuilder(k.topicManagerBuilder),
	}
}

// DefaultFetchWait is the fetch wait of a zero Kafka.FetchWait: Kafka's
// own default (fetch.max.wait.ms).
const DefaultFetchWait = 500 * time.Millisecond

// ValidFetchWait is whether d can be a fetch wait: 0 (DefaultFetchWait)
// or 1 ms to 1 s (Kafka counts it in whole milliseconds).
func ValidFetchWait(d time.Duration) bool {
	return d == 0 || (d >= time.Millisecond && d <= time.Second)
}

func (k Kafka) fetchWait() time.Duration {
	if k.FetchWait > 0 {
		return k.FetchWait
	}
	return DefaultFetchWait
}

// ViewOptions wires a Goka view to this cluster.
func (k Kafka) ViewOptions() []goka.ViewOption {
	return []goka.ViewOption{
		goka.WithViewHasher(k.Hasher),
		goka.WithViewConsumerSaramaBuilder(k.consumerBuilder),
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

// ivrsched creates its topics itself (topology.EnsureTopics), so Goka only
// checks.
func (k Kafka) topicManagerConfig() *goka.TopicManagerConfig {
	tm := goka.NewTopicManagerConfig()
	tm.Table.Replication = k.Replication
	tm.Stream.Replication = k.Replication
	tm.NoCreate = true
	tm.MismatchBehavior = goka.TMConfigMismatchBehaviorFail
	return tm
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
