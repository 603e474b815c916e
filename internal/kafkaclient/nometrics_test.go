package kafkaclient

import (
	"testing"

	"github.com/IBM/sarama"
	metrics "github.com/rcrowley/go-metrics"
)

// Sarama's clients built with Kafka.Sarama keep none of Sarama's own
// metrics: a producer and a consumer that moved records leave the
// configuration's registry empty, and a meter Sarama asks it for counts
// nothing.
func TestSaramaKeepsNoMetrics(t *testing.T) {
	_, k := broker(t)
	k.Partitions = 2
	topics(t, k, "measured")
	cfg := k.Sarama()
	p, err := sarama.NewSyncProducer(k.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "measured", Key: sarama.StringEncoder(rune('a' + i)), Value: sarama.StringEncoder("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := sarama.NewConsumer(k.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := c.ConsumePartition("measured", 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	within(t, pc.Messages(), "a record")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	if all := cfg.MetricRegistry.GetAll(); len(all) != 0 {
		t.Errorf("the registry holds %d of Sarama's metrics after a producer and a consumer ran, want none", len(all))
	}
	m := metrics.GetOrRegisterMeter("request-rate", cfg.MetricRegistry)
	m.Mark(5)
	if n := m.Count(); n != 0 {
		t.Errorf("a meter of the registry counted %d, want one that keeps nothing", n)
	}
	h := cfg.MetricRegistry.GetOrRegister("request-latency-in-ms", func() metrics.Histogram {
		return metrics.NewHistogram(metrics.NewExpDecaySample(1028, 0.015))
	}).(metrics.Histogram)
	h.Update(3)
	if n := h.Count(); n != 0 {
		t.Errorf("a histogram of the registry counted %d, want one that keeps nothing", n)
	}
}
