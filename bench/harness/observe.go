package harness

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// ObserveTopic consumes every partition of topic from the oldest offset and
// sends a Fire per record that decode accepts; At is set to the time the
// record was received. It returns when ctx ends.
func ObserveTopic(ctx context.Context, brokers []string, topic string, out chan<- Fire, decode func(*sarama.ConsumerMessage) (Fire, bool)) error {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return fmt.Errorf("observe %s: %w", topic, err)
	}
	defer client.Close()
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return fmt.Errorf("observe %s: %w", topic, err)
	}
	defer c.Close()
	// The topic may not be in the metadata yet when a system has just started.
	var parts []int32
	for {
		if parts, err = c.Partitions(topic); err == nil && len(parts) > 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("observe %s: %w", topic, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	var wg sync.WaitGroup
	for _, part := range parts {
		// A partition of a topic just created may have no leader yet.
		pc, err := c.ConsumePartition(topic, part, sarama.OffsetOldest)
		for err != nil {
			select {
			case <-ctx.Done():
				return fmt.Errorf("observe %s/%d: %w", topic, part, err)
			case <-time.After(100 * time.Millisecond):
			}
			_ = client.RefreshMetadata(topic)
			pc, err = c.ConsumePartition(topic, part, sarama.OffsetOldest)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pc.Close()
			for {
				select {
				case <-ctx.Done():
					return
				case m, ok := <-pc.Messages():
					if !ok {
						return
					}
					at := time.Now()
					f, ok := decode(m)
					if !ok {
						continue
					}
					f.At = at
					select {
					case out <- f:
					case <-ctx.Done():
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return nil
}
