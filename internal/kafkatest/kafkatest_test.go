package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestMain(m *testing.M) { Main(m) }

// TestFetch also serves fetch.sh, which runs it alone to fill the cache.
func TestFetch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	libDir, err := Fetch(ctx)
	if err != nil {
		failOrSkip(t, err)
	}
	for _, pattern := range []string{
		"kafka_2.13-" + KafkaVersion + ".jar",
		"kafka-clients-" + KafkaVersion + ".jar",
		"slf4j-api-2.*.jar",
		"log4j-slf4j2-impl-*.jar",
		"log4j-core-*.jar",
	} {
		matches, err := filepath.Glob(filepath.Join(libDir, pattern))
		if err != nil || len(matches) != 1 {
			t.Errorf("%s: want exactly one %s, got %v (err %v)", libDir, pattern, matches, err)
		}
	}
	if slf4j1, _ := filepath.Glob(filepath.Join(libDir, "slf4j-api-1.*.jar")); len(slf4j1) != 0 {
		t.Errorf("slf4j 1 on the class path next to slf4j 2: %v", slf4j1)
	}

	again, err := Fetch(ctx)
	if err != nil || again != libDir {
		t.Errorf("second Fetch = %q, %v; want %q, nil", again, err, libDir)
	}
}

func TestProduceConsume(t *testing.T) {
	addr := ForTest(t)
	brokers := strings.Split(addr, ",")
	topic := uniqueTopic(t)

	createTopic(t, brokers, topic, 3)
	produce(t, brokers, topic, 2, "hello", 0)
	if got := readAll(t, brokers, topic, 2); !slices.Equal(got, []string{"hello"}) {
		t.Fatalf("partition 2 holds %q, want [hello]", got)
	}
	if got := readAll(t, brokers, topic, 0); len(got) != 0 {
		t.Fatalf("partition 0 holds %q, want nothing", got)
	}
}

func TestConsumerGroup(t *testing.T) {
	brokers := strings.Split(ForTest(t), ",")
	topic := uniqueTopic(t)
	groupID := topic + "-group"
	createTopic(t, brokers, topic, 1)
	produce(t, brokers, topic, 0, "for the group", 0)

	cfg := saramaConfig()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	group, err := sarama.NewConsumerGroup(brokers, groupID, cfg)
	if err != nil {
		t.Fatalf("NewConsumerGroup: %v", err)
	}
	defer group.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	handler := &firstMessage{values: make(chan string, 1)}
	consumed := make(chan error, 1)
	go func() { consumed <- group.Consume(ctx, []string{topic}, handler) }()
	select {
	case got := <-handler.values:
		if got != "for the group" {
			t.Fatalf("group consumed %q, want %q", got, "for the group")
		}
	case err := <-consumed:
		t.Fatalf("Consume returned before a message arrived: %v", err)
	case <-ctx.Done():
		t.Fatalf("no message for group %s: %v", groupID, ctx.Err())
	}
	cancel()
	if err := <-consumed; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Consume: %v", err)
	}

	admin, err := sarama.NewClusterAdmin(brokers, saramaConfig())
	if err != nil {
		t.Fatalf("NewClusterAdmin: %v", err)
	}
	defer admin.Close()
	offsets, err := admin.ListConsumerGroupOffsets(groupID, map[string][]int32{topic: {0}})
	if err != nil {
		t.Fatalf("ListConsumerGroupOffsets: %v", err)
	}
	if block := offsets.GetBlock(topic, 0); block == nil || block.Offset != 1 {
		t.Fatalf("committed offset of %s = %+v, want 1", groupID, block)
	}
}

// firstMessage is a sarama.ConsumerGroupHandler that commits the first
// message it sees and reports its value.
type firstMessage struct{ values chan string }

func (*firstMessage) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (*firstMessage) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *firstMessage) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for msg := range claim.Messages() {
		sess.MarkMessage(msg, "")
		sess.Commit() // synchronous: AutoCommit is off
		select {
		case h.values <- string(msg.Value):
		default:
		}
		return nil
	}
	return nil
}

func TestRestartKeepsData(t *testing.T) {
	began := time.Now()
	b := StartForTest(t)
	t.Logf("Start took %v", time.Since(began).Round(time.Millisecond))
	brokers := []string{b.Addr()}
	topic := uniqueTopic(t)

	createTopic(t, brokers, topic, 3)
	produce(t, brokers, topic, 1, "before restart", 0)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began = time.Now()
	if err := b.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("Restart took %v", time.Since(began).Round(time.Millisecond))
	if b.Addr() != brokers[0] {
		t.Fatalf("address changed on restart: %s, was %s", b.Addr(), brokers[0])
	}
	if got := readAll(t, brokers, topic, 1); !slices.Equal(got, []string{"before restart"}) {
		t.Fatalf("after Restart partition 1 holds %q, want [before restart]", got)
	}
	produce(t, brokers, topic, 1, "after restart", 1)

	b.Kill()
	began = time.Now()
	if err := b.Restart(ctx); err != nil {
		t.Fatalf("Restart after Kill: %v", err)
	}
	t.Logf("Restart after Kill took %v", time.Since(began).Round(time.Millisecond))
	want := []string{"before restart", "after restart"}
	if got := readAll(t, brokers, topic, 1); !slices.Equal(got, want) {
		t.Fatalf("after Kill and Restart partition 1 holds %q, want %q", got, want)
	}
}

func TestForTestUsesKafkaBrokers(t *testing.T) {
	const external = "192.0.2.1:9092,192.0.2.2:9092" // never dialled
	t.Setenv("KAFKA_BROKERS", external)
	if got := ForTest(t); got != external {
		t.Fatalf("ForTest = %q, want %q from KAFKA_BROKERS", got, external)
	}
}

func TestStartWithoutJava(t *testing.T) {
	t.Setenv("JAVA_HOME", "")
	t.Setenv("PATH", t.TempDir())
	b, err := Start(context.Background())
	if !errors.Is(err, ErrUnavailable) {
		if b != nil {
			b.Stop()
		}
		t.Fatalf("Start without java: err = %v, want one wrapping ErrUnavailable", err)
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	if _, err := findJava(); err != nil {
		failOrSkip(t, err)
	}
	for _, tc := range []struct {
		name string
		opt  Option
		want string // expected in the error, from the broker log
	}{
		// Fails in the storage format step, before the broker runs.
		{"bad JVM option", WithJVMArgs("-XX:+NoSuchKafkatestOption"), "NoSuchKafkatestOption"},
		// Passes the format step; the broker itself dies on start-up.
		{"missing authorizer", WithProperty("authorizer.class.name", "com.example.NoSuchAuthorizer"), "com.example.NoSuchAuthorizer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
			defer cancel()
			b, err := Start(ctx, tc.opt, WithStartTimeout(time.Minute))
			if err == nil {
				b.Stop()
				t.Fatal("Start succeeded")
			}
			if errors.Is(err, ErrUnavailable) {
				failOrSkip(t, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error does not quote %q from the broker log:\n%v", tc.want, err)
			}
		})
	}
}

// Helpers.

func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = SaramaVersion
	cfg.ClientID = "kafkatest-test"
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Consumer.Return.Errors = true
	return cfg
}

func uniqueTopic(t *testing.T) string {
	return fmt.Sprintf("kafkatest-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
}

// eventually calls f until it returns nil, failing t with f's last error
// after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, timeout, err)
		}
		<-ticker.C
	}
}

// createTopic creates topic and waits until every partition has a leader.
func createTopic(t *testing.T, brokers []string, topic string, partitions int32) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, saramaConfig())
	if err != nil {
		t.Fatalf("NewClusterAdmin: %v", err)
	}
	defer admin.Close()
	err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false)
	if err != nil {
		t.Fatalf("CreateTopic %s: %v", topic, err)
	}
	eventually(t, 30*time.Second, "topic "+topic+" ready", func() error {
		metas, err := admin.DescribeTopics([]string{topic})
		if err != nil {
			return err
		}
		if len(metas) != 1 || !errors.Is(metas[0].Err, sarama.ErrNoError) {
			return fmt.Errorf("describe: %+v", metas)
		}
		if n := int32(len(metas[0].Partitions)); n != partitions {
			return fmt.Errorf("%d partitions, want %d", n, partitions)
		}
		for _, p := range metas[0].Partitions {
			if p.Leader < 0 {
				return fmt.Errorf("partition %d has no leader", p.ID)
			}
		}
		return nil
	})
}

// produce sends value to the partition and checks the offset it got.
func produce(t *testing.T, brokers []string, topic string, partition int32, value string, wantOffset int64) {
	t.Helper()
	producer, err := sarama.NewSyncProducer(brokers, saramaConfig())
	if err != nil {
		t.Fatalf("NewSyncProducer: %v", err)
	}
	defer producer.Close()
	gotPartition, offset, err := producer.SendMessage(&sarama.ProducerMessage{
		Topic:     topic,
		Partition: partition,
		Value:     sarama.StringEncoder(value),
	})
	if err != nil {
		t.Fatalf("SendMessage %q: %v", value, err)
	}
	if gotPartition != partition || offset != wantOffset {
		t.Fatalf("SendMessage %q went to partition %d offset %d, want %d and %d",
			value, gotPartition, offset, partition, wantOffset)
	}
}

// readAll returns the values of all messages in the partition, retrying
// while the partition is not (yet) readable.
func readAll(t *testing.T, brokers []string, topic string, partition int32) []string {
	t.Helper()
	var values []string
	eventually(t, 30*time.Second, fmt.Sprintf("read %s/%d", topic, partition), func() error {
		var err error
		values, err = tryReadAll(brokers, topic, partition)
		return err
	})
	return values
}

func tryReadAll(brokers []string, topic string, partition int32) ([]string, error) {
	client, err := sarama.NewClient(brokers, saramaConfig())
	if err != nil {
		return nil, err
	}
	defer client.Close()
	newest, err := client.GetOffset(topic, partition, sarama.OffsetNewest)
	if err != nil {
		return nil, fmt.Errorf("newest offset: %w", err)
	}
	if newest == 0 {
		return nil, nil
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, partition, sarama.OffsetOldest)
	if err != nil {
		return nil, err
	}
	defer pc.Close()

	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	var values []string
	for {
		select {
		case msg := <-pc.Messages():
			values = append(values, string(msg.Value))
			if msg.Offset+1 >= newest {
				return values, nil
			}
		case cerr := <-pc.Errors():
			return nil, cerr
		case <-timeout.C:
			return nil, fmt.Errorf("read %d of %d messages before timeout", len(values), newest)
		}
	}
}
