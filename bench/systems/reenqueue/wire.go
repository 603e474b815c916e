package reenqueue

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/ivrsched/ivrsched/topology"
)

// DueHeader is the record header that carries a task's due time, as decimal
// Unix nanoseconds. The value carries it too (Message.DueUnixNano), as in the
// seeds, where the consumer parses targetTime from the message body.
const DueHeader = "due-unix-nano"

// Message is the value of a delay-topic record: the seeds' OnboardingTask
// (userId, triggerTime, taskType) with the harness's payload. The loop never
// changes it: a record not yet due is produced again byte for byte.
type Message struct {
	ID          string `json:"id"`
	User        string `json:"userId"`
	TriggerTime int64  `json:"triggerTime"` // Unix milliseconds, as in the seeds
	DueUnixNano int64  `json:"dueUnixNano"` // the exact due time
	Payload     []byte `json:"payload"`
}

// Encode returns the record value and the due header of m.
func (m Message) Encode() ([]byte, sarama.RecordHeader, error) {
	value, err := json.Marshal(m)
	if err != nil {
		return nil, sarama.RecordHeader{}, err
	}
	return value, sarama.RecordHeader{
		Key:   []byte(DueHeader),
		Value: []byte(strconv.FormatInt(m.DueUnixNano, 10)),
	}, nil
}

// DueOf returns the due time a record carries: from DueHeader if present,
// else from the value.
func DueOf(headers []*sarama.RecordHeader, value []byte) (time.Time, error) {
	for _, h := range headers {
		if h != nil && string(h.Key) == DueHeader {
			ns, err := strconv.ParseInt(string(h.Value), 10, 64)
			if err != nil {
				return time.Time{}, fmt.Errorf("header %s: %w", DueHeader, err)
			}
			return time.Unix(0, ns), nil
		}
	}
	var m Message
	if err := json.Unmarshal(value, &m); err != nil {
		return time.Time{}, fmt.Errorf("value: %w", err)
	}
	switch {
	case m.DueUnixNano != 0:
		return time.Unix(0, m.DueUnixNano), nil
	case m.TriggerTime != 0:
		return time.UnixMilli(m.TriggerTime), nil
	}
	return time.Time{}, errors.New("no due time in header or value")
}

// saramaConfig is the client configuration every part of this system uses.
func saramaConfig(clientID string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_6_0_0 // Kafka 4 needs V2_1_0_0 or newer
	c.ClientID = clientID
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.Retry.Max = 10
	c.Producer.Retry.Backoff = 100 * time.Millisecond
	c.Producer.Compression = sarama.CompressionNone
	// Keyed records go where the Java client (Spring's KafkaTemplate) and
	// kafkajs put them, so a re-produced record stays on its partition.
	c.Producer.Partitioner = sarama.NewCustomHashPartitioner(topology.Murmur2())
	c.Consumer.Return.Errors = true
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	return c
}
