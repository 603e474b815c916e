package kafkatest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// Consume reads topic from its start on brokers (comma-separated), handing
// each record to done until done says it is done; it fails t after within.
// cfg nil is Sarama's default configuration.
func Consume(t testing.TB, brokers, topic string, cfg *sarama.Config, within time.Duration, done func(*sarama.ConsumerMessage) bool) {
	t.Helper()
	if cfg == nil {
		cfg = sarama.NewConfig()
	}
	c, err := sarama.NewConsumer(strings.Split(brokers, ","), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	all := make(chan *sarama.ConsumerMessage)
	for _, p := range parts {
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		go func() {
			for m := range pc.Messages() {
				select {
				case all <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for n := 0; ; n++ {
		select {
		case m := <-all:
			if done(m) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("%s: %d records within %v, not all that were expected", topic, n, within)
		}
	}
}
