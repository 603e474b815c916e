package kafkaclient

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fakeProducer is a goka.Producer whose writes are answered when the test
// says, the way Goka's producer answers: a success with its message, a
// failure with a *sarama.ProducerError that carries it.
type fakeProducer struct {
	mu      sync.Mutex
	emitted []*fakeWrite
	sent    chan *fakeWrite // each write as it is emitted, if not nil
	closed  bool
}

type fakeWrite struct {
	msg    *sarama.ProducerMessage
	finish goka.PromiseFinisher
}

func (w *fakeWrite) ack()           { w.finish(w.msg, nil) }
func (w *fakeWrite) fail(err error) { w.finish(nil, &sarama.ProducerError{Msg: w.msg, Err: err}) }
func (w *fakeWrite) String() string {
	return fmt.Sprintf("%s/%s=%s", w.msg.Topic, w.msg.Key, w.msg.Value)
}

func (p *fakeProducer) Emit(topic, key string, value []byte) *goka.Promise {
	return p.EmitWithHeaders(topic, key, value, nil)
}

func (p *fakeProducer) EmitWithHeaders(topic, key string, value []byte, _ goka.Headers) *goka.Promise {
	prom, finish := goka.NewPromiseWithFinisher()
	w := &fakeWrite{msg: &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(value)}, finish: finish}
	p.mu.Lock()
	p.emitted = append(p.emitted, w)
	p.mu.Unlock()
	if p.sent != nil {
		p.sent <- w
	}
	return prom
}

func (p *fakeProducer) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}

func (p *fakeProducer) writes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, w := range p.emitted {
		out = append(out, w.String())
	}
	return out
}

// answer is what a promise ended with, on a channel.
func answer(p *goka.Promise) <-chan error {
	ch := make(chan error, 1)
	p.Then(func(err error) { ch <- err })
	return ch
}

func pending(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s answered (%v) before the write of its key before it", what, err)
	default:
	}
}

// A write of a key waits until the key's write before it is acknowledged;
// other keys do not wait.
func TestKeyOrderHoldsAWriteUntilTheKeysEarlierOneIsAcknowledged(t *testing.T) {
	inner := &fakeProducer{sent: make(chan *fakeWrite, 8)}
	p := newKeyOrder(inner, newKeyOrders(true))
	defer p.Close()
	a := answer(p.Emit("t", "u1", []byte("a")))
	first := <-inner.sent
	b := answer(p.Emit("t", "u1", []byte("b")))
	c := answer(p.Emit("t", "u1", nil))
	other := answer(p.Emit("t", "u2", []byte("x")))
	otherTopic := answer(p.Emit("s", "u1", []byte("y")))
	for range 2 {
		(<-inner.sent).ack()
	}
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	if err := <-otherTopic; err != nil {
		t.Fatal(err)
	}
	if got := inner.writes(); len(got) != 3 || got[0] != "t/u1=a" {
		t.Fatalf("sent %v before t/u1=a was acknowledged, want t/u1=a, t/u2=x, s/u1=y", got)
	}
	pending(t, b, "t/u1=b")
	first.ack()
	if err := <-a; err != nil {
		t.Fatal(err)
	}
	second := <-inner.sent
	if second.String() != "t/u1=b" {
		t.Fatalf("sent %v after t/u1=a, want t/u1=b", second)
	}
	pending(t, c, "the tombstone of t/u1")
	second.ack()
	if err := <-b; err != nil {
		t.Fatal(err)
	}
	third := <-inner.sent
	if third.String() != "t/u1=" {
		t.Fatalf("sent %v after t/u1=b, want the tombstone", third)
	}
	third.ack()
	if err := <-c; err != nil {
		t.Fatal(err)
	}
	// Nothing in flight: the next write goes out at once.
	d := answer(p.Emit("t", "u1", []byte("d")))
	(<-inner.sent).ack()
	if err := <-d; err != nil {
		t.Fatal(err)
	}
}

// When a write fails, the writes of its key held behind it fail too, never
// written. A processor's producer (failKey) then fails every later write
// of the key; an emitter's writes the key again once none of it is held.
func TestKeyOrderFailsTheWritesHeldBehindAFailedOne(t *testing.T) {
	refused := errors.New("refused")
	for _, failKey := range []bool{true, false} {
		t.Run(fmt.Sprintf("failKey=%v", failKey), func(t *testing.T) {
			inner := &fakeProducer{sent: make(chan *fakeWrite, 8)}
			p := newKeyOrder(inner, newKeyOrders(failKey))
			defer p.Close()
			a := answer(p.Emit("t", "u1", []byte("a")))
			first := <-inner.sent
			b := answer(p.Emit("t", "u1", []byte("b")))
			c := answer(p.Emit("t", "u1", []byte("c")))
			first.fail(refused)
			if err := <-a; !errors.Is(err, refused) {
				t.Fatalf("the refused write: %v", err)
			}
			for _, ch := range []<-chan error{b, c} {
				if err := <-ch; !errors.Is(err, ErrEarlierWriteFailed) || !errors.Is(err, refused) {
					t.Fatalf("a write held behind the refused one: %v, want ErrEarlierWriteFailed and its cause", err)
				}
			}
			if got := inner.writes(); len(got) != 1 {
				t.Fatalf("sent %v, want only the refused write", got)
			}
			d := p.Emit("t", "u1", []byte("d"))
			if failKey {
				if err := <-answer(d); !errors.Is(err, ErrEarlierWriteFailed) {
					t.Fatalf("a later write of the failed key: %v, want ErrEarlierWriteFailed", err)
				}
			} else {
				(<-inner.sent).ack()
				if err := <-answer(d); err != nil {
					t.Fatalf("a later write of the key, nothing held: %v", err)
				}
			}
			e := answer(p.Emit("t", "u2", []byte("e")))
			(<-inner.sent).ack()
			if err := <-e; err != nil {
				t.Fatalf("another key: %v", err)
			}
		})
	}
}

// Close fails the writes still held (once its wait is over) and closes
// the producer it wraps; a write emitted after Close fails.
func TestKeyOrderCloseWaitsForHeldWrites(t *testing.T) {
	inner := &fakeProducer{sent: make(chan *fakeWrite, 8)}
	p := newKeyOrder(inner, newKeyOrders(true))
	a := answer(p.Emit("t", "u1", []byte("a")))
	first := <-inner.sent
	b := answer(p.Emit("t", "u1", []byte("b")))
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	first.ack() // Close waits until b is sent
	if err := <-a; err != nil {
		t.Fatal(err)
	}
	(<-inner.sent).ack()
	if err := <-b; err != nil {
		t.Fatalf("the held write: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if !inner.closed {
		t.Fatal("the wrapped producer is not closed")
	}
	if err := <-answer(p.Emit("t", "u3", nil)); !errors.Is(err, ErrProducerClosed) {
		t.Fatalf("a write after Close: %v, want ErrProducerClosed", err)
	}
}

// nopProducer makes a promise per write, as Goka's producer does, and
// answers it when the benchmark says.
type nopProducer struct{ finish goka.PromiseFinisher }

func (p *nopProducer) Emit(topic, key string, value []byte) *goka.Promise {
	return p.EmitWithHeaders(topic, key, value, nil)
}

func (p *nopProducer) EmitWithHeaders(string, string, []byte, goka.Headers) *goka.Promise {
	var prom *goka.Promise
	prom, p.finish = goka.NewPromiseWithFinisher()
	return prom
}

func (p *nopProducer) Close() error { return nil }

// BenchmarkKeyOrderWrite is one write of a key with nothing in flight and
// its acknowledgement, the steady state of the scheduler's and the
// dialer's writes: on the producer alone, and through the wrapper (the
// difference is the wrapper's cost).
func BenchmarkKeyOrderWrite(b *testing.B) {
	msgs := make([]*sarama.ProducerMessage, 1024)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: "scheduler-table", Key: sarama.StringEncoder(fmt.Sprintf("user-%d", i))}
	}
	for _, tc := range []struct {
		name string
		wrap func(goka.Producer) goka.Producer
	}{
		{"producer", func(p goka.Producer) goka.Producer { return p }},
		{"keyorder", func(p goka.Producer) goka.Producer { return newKeyOrder(p, newKeyOrders(true)) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			inner := &nopProducer{}
			p := tc.wrap(inner)
			defer p.Close()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				m := msgs[i%len(msgs)]
				p.Emit(m.Topic, string(m.Key.(sarama.StringEncoder)), nil).ThenWithMessage(goOn)
				inner.finish(m, nil)
			}
		})
	}
}

// goOn stands for Goka's callback on every write's promise.
func goOn(*sarama.ProducerMessage, error) {}

// Producers that share their key order (an emitter's, replaced by a
// reviving emitter) keep it together: a write of a key to the new one
// waits for the old one's write of it. When the old one closes without
// the answer to a write, the writes held behind it fail, and the key is
// free again.
func TestKeyOrderSpansTheProducersThatShareIt(t *testing.T) {
	orders := newKeyOrders(false)
	oldInner, newInner := &fakeProducer{sent: make(chan *fakeWrite, 8)}, &fakeProducer{sent: make(chan *fakeWrite, 8)}
	old, revived := newKeyOrder(oldInner, orders), newKeyOrder(newInner, orders)
	defer revived.Close()
	a := answer(old.Emit("loop", "u1", []byte("a")))
	first := <-oldInner.sent
	b := answer(revived.Emit("loop", "u1", []byte("b")))
	other := answer(revived.Emit("loop", "u2", []byte("x")))
	(<-newInner.sent).ack()
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	pending(t, b, "the new producer's write of u1")
	first.ack()
	if err := <-a; err != nil {
		t.Fatal(err)
	}
	second := <-newInner.sent
	if second.String() != "loop/u1=b" {
		t.Fatalf("the new producer sent %v, want loop/u1=b", second)
	}
	second.ack()
	if err := <-b; err != nil {
		t.Fatal(err)
	}

	// The old producer's write is never answered: its Close gives up on it.
	c := answer(old.Emit("loop", "u1", []byte("c")))
	<-oldInner.sent
	d := answer(revived.Emit("loop", "u1", []byte("d")))
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	pending(t, c, "the unanswered write")
	if err := <-d; !errors.Is(err, ErrEarlierWriteFailed) || !errors.Is(err, ErrProducerClosed) {
		t.Fatalf("a write held behind one never answered: %v, want ErrEarlierWriteFailed and ErrProducerClosed", err)
	}
	e := answer(revived.Emit("loop", "u1", []byte("e")))
	(<-newInner.sent).ack()
	if err := <-e; err != nil {
		t.Fatalf("a write of the key after that: %v", err)
	}
}

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
	k := config(c, "order")
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
	if err := within(t, tombstone, "the tombstone's answer"); !errors.Is(err, ErrEarlierWriteFailed) {
		t.Fatalf("tombstone emitted behind the failed value: %v, want ErrEarlierWriteFailed", err)
	}
	if err := within(t, errs(p.Emit(topic, "user-1", []byte("later"))), "a later write's answer"); !errors.Is(err, ErrEarlierWriteFailed) {
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
func valueThenTombstone(t *testing.T, k Kafka, topic string, held <-chan struct{}) (goka.Producer, <-chan error, <-chan error) {
	t.Helper()
	p, err := k.ProducerBuilder(k.Brokers, k.ClientID, k.Hasher)
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
func readPartition(t *testing.T, k Kafka, topic string) []*sarama.ConsumerMessage {
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
// them: a RevivingEmitter that replaced its producer after a refusal
// writes a key only once the old producer's write of that key is
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
