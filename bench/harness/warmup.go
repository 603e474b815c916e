package harness

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// WarmKafka loads a broker for d before any system is measured, so that the
// JVM compiles the broker's produce and fetch paths now and not during the
// first system's phases: it produces small records to a topic of its own
// (acknowledged by all replicas, like the systems' records) and consumes
// them (from the oldest). It returns how many records it consumed.
func WarmKafka(ctx context.Context, brokers []string, partitions int, d time.Duration) (int64, error) {
	const topic = "ivrbench-warmup"
	spec := []topology.TopicSpec{{Name: topic, Retain: time.Hour}}
	if err := topology.EnsureTopics(ctx, kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: brokers, Partitions: partitions, Replication: 1}, spec); err != nil {
		return 0, fmt.Errorf("warm-up: %w", err)
	}
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Flush.Frequency = time.Millisecond
	cfg.Producer.Return.Errors = true
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return 0, fmt.Errorf("warm-up: %w", err)
	}
	defer client.Close()
	producer, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		return 0, fmt.Errorf("warm-up: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var consumed atomic.Int64
	observed := make(chan error, 1)
	go func() {
		observed <- ObserveTopic(wctx, brokers, topic, nil, func(*sarama.ConsumerMessage) (Fire, bool) {
			consumed.Add(1)
			return Fire{}, false
		})
	}()
	errc := make(chan error, 1)
	go func() {
		var first error
		for e := range producer.Errors() {
			if first == nil {
				first = e.Err
			}
		}
		errc <- first
	}()
	value := make(sarama.ByteEncoder, 200)
	for i := 0; wctx.Err() == nil; i++ {
		select {
		case producer.Input() <- &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprint("k", i%1000)), Value: value}:
		case <-wctx.Done():
		}
	}
	producer.AsyncClose() // flushes, then closes the errors channel
	produceErr := <-errc
	observeErr := <-observed
	switch {
	case ctx.Err() != nil:
		return consumed.Load(), ctx.Err()
	case produceErr != nil:
		return consumed.Load(), fmt.Errorf("warm-up: produce: %w", produceErr)
	case observeErr != nil:
		return consumed.Load(), fmt.Errorf("warm-up: %w", observeErr)
	}
	return consumed.Load(), nil
}
