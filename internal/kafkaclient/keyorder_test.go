package kafkaclient

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ivrsched/ivrsched/topology"
)

// Two writes of one key through the producer Goka gets reach the topic in
// the order they were emitted, also when the broker refused the first one
// once with a retriable error: a user's value, then a Forget's tombstone,
// ends with the tombstone.
//
// The broker holds the produce request of the value and then refuses it
// with NOT_LEADER_FOR_PARTITION (Sarama retries it). With one request in
// flight per broker, Sarama 1.46.3 still writes its next request (the
// tombstone's) to the connection while the first is unanswered; the broker
// takes it meanwhile (kfake.SleepOutOfOrder, answers still in order), so
// the tombstone is written before the value's retry, and the user's value
// comes back. A producer that keeps a key's order does not send the
// tombstone before the value is acknowledged: then the request never
// comes, and the hold ends after holdFor (Sarama sends a batch within its
// 1 ms flush frequency).
func TestWritesOfAKeyStayInOrderAcrossARetriableRefusal(t *testing.T) {
	const (
		topic   = "users-table"
		holdFor = 300 * time.Millisecond
	)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SleepOutOfOrder())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	k := topology.Kafka{Brokers: c.ListenAddrs(), ClientID: "order", Partitions: 1, Replication: 1, FlushFrequency: time.Millisecond}
	topics(t, k, topic)

	held := refuseFirstProduce(c, topic, kerr.NotLeaderForPartition, untilNextOr(holdFor))
	_, value, tombstone := valueThenTombstone(t, k, topic, held)
	if err := within(t, value, "the value's acknowledgement"); err != nil {
		t.Fatalf("value: %v", err)
	}
	if err := within(t, tombstone, "the tombstone's acknowledgement"); err != nil {
		t.Fatalf("tombstone: %v", err)
	}

	got := readPartition(t, k, topic)
	if len(got) < 2 {
		t.Fatalf("%d records on %s, want the value and the tombstone", len(got), topic)
	}
	if last := got[len(got)-1]; last.Value != nil {
		t.Fatalf("the last record of user-1 (offset %d of %d) is the value %q, not the tombstone emitted after it: the erased user comes back on restore",
			last.Offset, len(got), last.Value)
	}
}

// When a write fails, the writes of its key emitted behind it fail too,
// unwritten, and so does every later write of the key through a
// processor's producer (its partition fails and its input replays): a
// topic never has a later value of a key after an earlier one that failed.
// This also pins what the producer reads the failed write's key from:
// Goka answers a failure with a *sarama.ProducerError carrying the message.
func TestWritesOfAKeyBehindAFailedOneFail(t *testing.T) {
	const topic = "users-table"
	c, k := broker(t)
	topics(t, k, topic)
	release := make(chan struct{})
	held := refuseFirstProduce(c, topic, kerr.MessageTooLarge, func(<-chan struct{}) { <-release }) // not retriable
	p, value, tombstone := valueThenTombstone(t, k, topic, held)
	close(release)
	if err := within(t, value, "the value's answer"); !errors.Is(err, sarama.ErrMessageSizeTooLarge) {
		t.Fatalf("value: %v, want %v", err, sarama.ErrMessageSizeTooLarge)
	}
	if err := within(t, tombstone, "the tombstone's answer"); !errors.Is(err, topology.ErrEarlierWriteFailed) {
		t.Fatalf("tombstone emitted behind the failed value: %v, want ErrEarlierWriteFailed", err)
	}
	if err := within(t, errs(p.Emit(topic, "user-1", []byte("later"))), "a later write's answer"); !errors.Is(err, topology.ErrEarlierWriteFailed) {
		t.Fatalf("a later write of the key: %v, want ErrEarlierWriteFailed", err)
	}
	if err := within(t, errs(p.Emit(topic, "user-2", []byte("other"))), "another key's answer"); err != nil {
		t.Fatalf("another key: %v", err)
	}
	if got := readPartition(t, k, topic); len(got) != 1 || string(got[0].Key) != "user-2" {
		t.Fatalf("%d records on %s, want user-2's alone", len(got), topic)
	}
}

// refuseFirstProduce makes the broker hold the first produce request to
// topic until wake returns, then refuse it with err; wake is given a
// channel closed when the next produce request to topic comes. held is
// closed when the broker holds the first.
func refuseFirstProduce(c *kfake.Cluster, topic string, err *kerr.Error, wake func(next <-chan struct{})) (held <-chan struct{}) {
	var requests atomic.Int32
	h, next := make(chan struct{}), make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) == 0 || pr.Topics[0].Topic != topic {
			return nil, nil, false
		}
		switch requests.Add(1) {
		case 1:
			close(h)
			c.SleepControl(func() { wake(next) })
			return refuse(pr, err), nil, true
		case 2:
			close(next)
		}
		return nil, nil, false
	})
	return h
}

// untilNextOr is a wake for refuseFirstProduce: the next request, or d
// without it.
func untilNextOr(d time.Duration) func(next <-chan struct{}) {
	return func(next <-chan struct{}) {
		select {
		case <-next:
		case <-time.After(d):
		}
	}
}

// valueThenTombstone emits a value of user-1 to topic through the producer
// Goka gets, and once the broker holds its request, the user's tombstone;
// it returns the producer (closed when t ends) and both answers.
func valueThenTombstone(t *testing.T, k topology.Kafka, topic string, held <-chan struct{}) (goka.Producer, <-chan error, <-chan error) {
	t.Helper()
	p, err := k.ProducerBuilder(k.Brokers, k.ClientID, topology.Murmur2())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	value := errs(p.Emit(topic, "user-1", []byte("scheduled")))
	within(t, held, "the value's produce request")
	return p, value, errs(p.Emit(topic, "user-1", nil))
}

// refuse answers req refusing every partition with err.
func refuse(req *kmsg.ProduceRequest, err *kerr.Error) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = rt.Topic, rt.TopicID
		for _, rp := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.ErrorCode = err.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// readPartition returns the records of topic's partition 0, oldest first.
func readPartition(t *testing.T, k topology.Kafka, topic string) []*sarama.ConsumerMessage {
	t.Helper()
	client, err := sarama.NewClient(k.Brokers, k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	newest, err := client.GetOffset(topic, 0, sarama.OffsetNewest)
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var out []*sarama.ConsumerMessage
	for len(out) == 0 || out[len(out)-1].Offset < newest-1 { // compaction may leave gaps
		out = append(out, within(t, pc.Messages(), "a record of "+topic))
	}
	return out
}

// The emitters built from one EmitterOptions keep each key's order between
// them: a reviving emitter (internal/app) that replaced its producer after
// a refusal writes a key only once the old producer's write of that key is
// acknowledged. Here the old emitter's value is held and refused once (its
// retry comes later) while the new emitter writes the user's tombstone.
func TestEmittersOfOneOptionsKeepAKeysOrderBetweenThem(t *testing.T) {
	const (
		topic   = "users-loop"
		holdFor = 300 * time.Millisecond
	)
	c, k := broker(t)
	topics(t, k, topic)
	held := refuseFirstProduce(c, topic, kerr.NotLeaderForPartition, untilNextOr(holdFor))
	opts := k.EmitterOptions()
	emitter := func() *goka.Emitter {
		em, err := goka.NewEmitter(k.Brokers, topic, new(codec.Bytes), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { em.Finish() })
		return em
	}
	old, revived := emitter(), emitter()
	prom, err := old.Emit("user-1", []byte("scheduled"))
	if err != nil {
		t.Fatal(err)
	}
	value := errs(prom)
	within(t, held, "the value's produce request")
	if prom, err = revived.Emit("user-1", nil); err != nil {
		t.Fatal(err)
	}
	if err := within(t, value, "the value's acknowledgement"); err != nil {
		t.Fatalf("value: %v", err)
	}
	if err := within(t, errs(prom), "the tombstone's acknowledgement"); err != nil {
		t.Fatalf("tombstone: %v", err)
	}
	got := readPartition(t, k, topic)
	if last := got[len(got)-1]; len(got) < 2 || last.Value != nil {
		t.Fatalf("the last of %d records of user-1 is %q, not the tombstone the second emitter wrote after the first's value", len(got), last.Value)
	}
}
