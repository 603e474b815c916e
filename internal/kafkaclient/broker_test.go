package kafkaclient

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// broker starts a one-broker kfake cluster, stopped when t ends, and
// returns it with ivrsched's client configuration for it (one partition).
func broker(t *testing.T) (*kfake.Cluster, Kafka) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, config(c, "behaviour")
}

// config is ivrsched's client configuration for c (one partition). The
// topics of these tests have one partition each, so the hasher (ivrsched's
// is topology.Murmur2, which this package does not import) places nothing.
func config(c *kfake.Cluster, clientID string) Kafka {
	return Kafka{Hasher: fnv.New32a, Brokers: c.ListenAddrs(), ClientID: clientID, Partitions: 1, Replication: 1, FlushFrequency: time.Millisecond}
}

// topics creates the topics with k.Partitions partitions each (a name
// ending in "-table" compacted, the others kept an hour), as
// topology.EnsureTopics would, and waits until the broker lists them.
func topics(t *testing.T, k Kafka, names ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := k.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		policy, retention := "delete", strconv.FormatInt(time.Hour.Milliseconds(), 10)
		if len(n) > 6 && n[len(n)-6:] == "-table" {
			policy = "compact"
		}
		err := admin.CreateTopic(n, &sarama.TopicDetail{NumPartitions: int32(k.Partitions), ReplicationFactor: 1,
			ConfigEntries: map[string]*string{"cleanup.policy": &policy, "retention.ms": &retention}}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			t.Fatalf("create topic %s: %v", n, err)
		}
	}
	for {
		err := client.RefreshMetadata(names...)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topics %v not listed: %v", names, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// produce writes values to partition 0 of topic under key, in order, and
// returns their offsets.
func produce(t *testing.T, k Kafka, topic, key string, values ...string) []int64 {
	t.Helper()
	p, err := sarama.NewSyncProducer(k.Brokers, k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var offs []int64
	for _, v := range values {
		_, off, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder(v)})
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, off)
	}
	return offs
}

// holdProduce makes the broker hold the first produce request that carries
// topic until the returned release is called (also when t ends); held is
// closed when it holds it.
func holdProduce(t *testing.T, c *kfake.Cluster, topic string) (held <-chan struct{}, release func()) {
	t.Helper()
	h, r := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	armed.Store(true)
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == topic && armed.CompareAndSwap(true, false) {
				close(h)
				c.SleepControl(func() { <-r })
			}
		}
		return nil, nil, false
	})
	var once sync.Once
	release = func() { once.Do(func() { close(r) }) }
	t.Cleanup(release)
	return h, release
}

// within fails t unless ch is closed or sends within 30 s.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: not within 30 s", what)
		panic("unreachable")
	}
}
