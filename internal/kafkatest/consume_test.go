package kafkatest

import (
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Consume hands every partition's records to done, from the start, until
// done says it is done.
func TestConsumeReadsEveryPartitionFromTheStart(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := strings.Join(c.ListenAddrs(), ",")
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(c.ListenAddrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for part := range int32(3) {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "t", Partition: part, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder("v")}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int32]bool{}
	Consume(t, brokers, "t", nil, 10*time.Second, func(m *sarama.ConsumerMessage) bool {
		seen[m.Partition] = true
		return len(seen) == 3
	})
}
