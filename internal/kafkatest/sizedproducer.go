package kafkatest

import (
	"fmt"
	"hash"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
)

// SizedProducer wraps a Goka producer builder (the tester's) so that its
// producers refuse a record larger than maxMessageBytes as Sarama's
// producer does (it counts ProducerMessage.ByteSize of the record batch
// version, 2): the record is not sent, and its promise fails with Sarama's
// error, which fails the partition that emitted it. Goka's tester alone
// accepts a record of any size.
func SizedProducer(b goka.ProducerBuilder, maxMessageBytes int) goka.ProducerBuilder {
	return func(brokers []string, clientID string, hasher func() hash.Hash32) (goka.Producer, error) {
		p, err := b(brokers, clientID, hasher)
		if err != nil {
			return nil, err
		}
		return &sizedProducer{Producer: p, max: maxMessageBytes}, nil
	}
}

type sizedProducer struct {
	goka.Producer
	max int
}

func (p *sizedProducer) Emit(topic, key string, value []byte) *goka.Promise {
	return p.EmitWithHeaders(topic, key, value, nil)
}

func (p *sizedProducer) EmitWithHeaders(topic, key string, value []byte, headers goka.Headers) *goka.Promise {
	m := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(value)}
	for k, v := range headers {
		m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(k), Value: v})
	}
	if n := m.ByteSize(2); n > p.max {
		_, finish := goka.NewPromiseWithFinisher()
		return finish(m, sarama.ConfigurationError(fmt.Sprintf("Producer.MaxMessageBytes: %d > %d", n, p.max)))
	}
	return p.Producer.EmitWithHeaders(topic, key, value, headers)
}
