package reenqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// Variants of the loop.
const (
	// Immediate produces a record that is not yet due to the delay topic
	// again at once (the seeds' Spring Kafka listener).
	Immediate = "immediate"
	// Hold60s holds a record that is not yet due off the poll loop for
	// min(remaining, 60 s) and then produces it to the target topic if it
	// is due, else to the delay topic again (the seeds' kafkajs consumer
	// with its one-minute setTimeout).
	Hold60s = "hold60s"
)

// LoopConfig configures RunLoop.
type LoopConfig struct {
	Brokers     []string
	DelayTopic  string
	TargetTopic string
	Group       string
	ClientID    string
	Variant     string        // Immediate or Hold60s
	Hold        time.Duration // the longest hold of Hold60s; default 60 s
	// SessionTimeout of the consumer group member; 0 keeps sarama's 10 s.
	SessionTimeout time.Duration
	// DrainTimeout bounds how long a partition that is revoked (or a loop
	// that stops) waits for its produce requests in flight, so that their
	// offsets are committed before the partition goes. Default 5 s.
	DrainTimeout time.Duration
	Log          *slog.Logger
}

// LoopStats counts what a loop did. Every field is a count of records.
type LoopStats struct {
	Consumed      int64 // records read from the delay topic
	Reproduced    int64 // produced to the delay topic again (acknowledged)
	Fired         int64 // produced to the target topic (acknowledged)
	ProduceErrors int64 // produce attempts that failed after sarama's retries (each is sent again)
	Bad           int64 // records without a readable due time (skipped)
	Held          int64 // records held right now (Hold60s)
	Dropped       int64 // holds cancelled because their partition was revoked (re-read by the next owner)
}

func (s LoopStats) String() string {
	return fmt.Sprintf("consumed=%d reproduced=%d fired=%d produce_errors=%d bad=%d held=%d dropped_holds=%d",
		s.Consumed, s.Reproduced, s.Fired, s.ProduceErrors, s.Bad, s.Held, s.Dropped)
}

// Loop is a running re-enqueue loop.
type Loop struct {
	cfg      LoopConfig
	log      *slog.Logger
	producer sarama.AsyncProducer

	sendMu sync.RWMutex // held for reading by senders, for writing by Close
	closed bool

	consumed, reproduced, fired, produceErrors, bad, held, dropped atomic.Int64
}

// Stats returns the counts so far.
func (l *Loop) Stats() LoopStats {
	return LoopStats{
		Consumed:      l.consumed.Load(),
		Reproduced:    l.reproduced.Load(),
		Fired:         l.fired.Load(),
		ProduceErrors: l.produceErrors.Load(),
		Bad:           l.bad.Load(),
		Held:          l.held.Load(),
		Dropped:       l.dropped.Load(),
	}
}

// RunLoop consumes cfg.DelayTopic in consumer group cfg.Group until ctx
// ends, then stops cleanly (in-flight produces are awaited, offsets
// committed) and returns the loop's counts. running, if not nil, is called
// with the loop as soon as it runs (Stats gives live counts).
func RunLoop(ctx context.Context, cfg LoopConfig, running func(*Loop)) (LoopStats, error) {
	switch cfg.Variant {
	case Immediate, Hold60s:
	default:
		return LoopStats{}, fmt.Errorf("reenqueue: unknown variant %q (want %s or %s)", cfg.Variant, Immediate, Hold60s)
	}
	if cfg.Hold <= 0 {
		cfg.Hold = 60 * time.Second
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "reenqueue-loop"
	}
	sc := saramaConfig(cfg.ClientID)
	if cfg.SessionTimeout > 0 {
		sc.Consumer.Group.Session.Timeout = cfg.SessionTimeout
		sc.Consumer.Group.Heartbeat.Interval = cfg.SessionTimeout / 4
	}
	// Offsets are marked only once the record's produce is acknowledged
	// (the seeds' ack.acknowledge() in the send callback) and committed
	// every second.
	sc.Consumer.Offsets.AutoCommit.Enable = true
	sc.Consumer.Offsets.AutoCommit.Interval = time.Second

	// The producer and the consumer group have a client (so connections)
	// each: Kafka answers one request per connection at a time, so on a
	// shared connection a produce waits behind the consumer's long-poll
	// fetch (up to Consumer.MaxWaitTime, 500 ms). Java's KafkaTemplate and
	// listener container, and kafkajs, also connect separately.
	producer, err := sarama.NewAsyncProducer(cfg.Brokers, sc)
	if err != nil {
		return LoopStats{}, fmt.Errorf("reenqueue: producer: %w", err)
	}
	group, err := sarama.NewConsumerGroup(cfg.Brokers, cfg.Group, sc)
	if err != nil {
		producer.Close()
		return LoopStats{}, fmt.Errorf("reenqueue: consumer group: %w", err)
	}
	l := &Loop{cfg: cfg, log: cfg.Log, producer: producer}

	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); l.acks() }()
	go func() { defer wg.Done(); l.nacks() }()
	go func() {
		defer wg.Done()
		for err := range group.Errors() {
			l.log.Warn("reenqueue: consumer group", "err", err)
		}
	}()
	if running != nil {
		running(l)
	}

	var runErr error
	for ctx.Err() == nil {
		err := group.Consume(ctx, []string{cfg.DelayTopic}, l)
		if err != nil && ctx.Err() == nil {
			if errors.Is(err, sarama.ErrClosedConsumerGroup) {
				runErr = err
				break
			}
			l.log.Warn("reenqueue: consume", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	// ConsumeClaim has waited for the produces in flight; Close commits.
	if err := group.Close(); err != nil {
		l.log.Warn("reenqueue: close consumer group", "err", err)
	}
	l.sendMu.Lock()
	l.closed = true
	l.sendMu.Unlock()
	producer.AsyncClose()
	wg.Wait()
	return l.Stats(), runErr
}

// Setup is part of sarama.ConsumerGroupHandler.
func (l *Loop) Setup(s sarama.ConsumerGroupSession) error {
	l.log.Info("reenqueue: partitions assigned", "claims", s.Claims(), "generation", s.GenerationID())
	return nil
}

// Cleanup is part of sarama.ConsumerGroupHandler.
func (l *Loop) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// ConsumeClaim is the loop over one partition of the delay topic.
func (l *Loop) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	t := &tracker{
		sess:      s,
		ctx:       s.Context(),
		topic:     claim.Topic(),
		partition: claim.Partition(),
	}
	t.idle = sync.NewCond(&t.mu)
	defer l.release(t)
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			l.handle(t, msg)
		case <-t.ctx.Done():
			return nil
		}
	}
}

// handle decides what to do with one record of the delay topic.
func (l *Loop) handle(t *tracker, msg *sarama.ConsumerMessage) {
	l.consumed.Add(1)
	due, err := DueOf(msg.Headers, msg.Value)
	e := t.add(msg, due)
	if err != nil {
		// No due time: nothing in the seeds handles this; skip it (and
		// say so) rather than stop the partition.
		l.bad.Add(1)
		l.log.Warn("reenqueue: record without due time skipped",
			"partition", msg.Partition, "offset", msg.Offset, "err", err)
		t.complete(e)
		return
	}
	now := time.Now()
	if !now.Before(due) {
		l.send(e, l.cfg.TargetTopic)
		return
	}
	if l.cfg.Variant == Immediate {
		l.send(e, l.cfg.DelayTopic)
		return
	}
	l.held.Add(1)
	l.hold(e, due.Sub(now))
}

// hold keeps e off the poll loop for min(remaining, Hold); the consumer
// goes on reading the partition meanwhile. e's offset is not marked until
// e has been produced somewhere, so the committed offset of the partition
// stays at the oldest held record: a crash re-reads everything after it.
func (l *Loop) hold(e *entry, remaining time.Duration) {
	d, capped := remaining, false
	if d > l.cfg.Hold {
		d, capped = l.cfg.Hold, true
	}
	t := e.t
	t.mu.Lock()
	defer t.mu.Unlock()
	e.timer = time.AfterFunc(d, func() { l.holdEnded(e, capped) })
}

func (l *Loop) holdEnded(e *entry, capped bool) {
	t := e.t
	t.mu.Lock()
	if e.cancelled {
		t.mu.Unlock()
		return
	}
	e.timer = nil // no longer cancellable: it is being sent or re-armed
	t.mu.Unlock()
	if t.ctx.Err() != nil {
		// The partition is gone: its next owner reads the record again.
		l.held.Add(-1)
		l.dropped.Add(1)
		return
	}
	remaining := time.Until(e.due)
	switch {
	case remaining <= 0:
		l.held.Add(-1)
		l.send(e, l.cfg.TargetTopic)
	case capped:
		l.held.Add(-1)
		l.send(e, l.cfg.DelayTopic)
	default:
		// The timer ran on the monotonic clock and the due time is wall
		// clock: wait out the last microseconds rather than re-produce.
		l.hold(e, remaining)
	}
}

// send produces e's record, unchanged, to topic.
func (l *Loop) send(e *entry, topic string) {
	m := e.msg
	headers := make([]sarama.RecordHeader, 0, len(m.Headers))
	for _, h := range m.Headers {
		if h != nil {
			headers = append(headers, *h)
		}
	}
	pm := &sarama.ProducerMessage{
		Topic:    topic,
		Key:      sarama.ByteEncoder(m.Key),
		Value:    sarama.ByteEncoder(m.Value),
		Headers:  headers,
		Metadata: e,
	}
	if m.Key == nil {
		pm.Key = nil
	}
	e.t.sending(1)
	l.input(pm)
}

func (l *Loop) input(pm *sarama.ProducerMessage) {
	l.sendMu.RLock()
	defer l.sendMu.RUnlock()
	if l.closed {
		e := pm.Metadata.(*entry)
		e.t.sending(-1)
		return
	}
	l.producer.Input() <- pm
}

// acks handles acknowledged produces: the record's offset may be marked.
func (l *Loop) acks() {
	for pm := range l.producer.Successes() {
		e := pm.Metadata.(*entry)
		if pm.Topic == l.cfg.TargetTopic {
			l.fired.Add(1)
		} else {
			l.reproduced.Add(1)
		}
		e.t.complete(e)
		e.t.sending(-1)
	}
}

// nacks sends failed produces again after a second: at least once.
func (l *Loop) nacks() {
	for perr := range l.producer.Errors() {
		l.produceErrors.Add(1)
		pm := perr.Msg
		l.log.Warn("reenqueue: produce failed; retrying", "topic", pm.Topic, "err", perr.Err)
		retry := &sarama.ProducerMessage{
			Topic: pm.Topic, Key: pm.Key, Value: pm.Value, Headers: pm.Headers, Metadata: pm.Metadata,
		}
		time.AfterFunc(time.Second, func() { l.input(retry) })
	}
}

// release runs when a partition is revoked or the loop stops: holds are
// cancelled (their offsets were never marked, so the next owner reads them
// again), produces in flight are awaited so that their offsets make the
// final commit.
func (l *Loop) release(t *tracker) {
	t.mu.Lock()
	dropped := 0
	for _, e := range t.queue[t.head:] {
		if e.timer != nil && e.timer.Stop() {
			e.cancelled = true
			dropped++
		}
	}
	t.mu.Unlock()
	l.held.Add(int64(-dropped))
	l.dropped.Add(int64(dropped))

	deadline := time.AfterFunc(l.cfg.DrainTimeout, func() {
		t.mu.Lock()
		t.gaveUp = true
		t.idle.Broadcast()
		t.mu.Unlock()
	})
	defer deadline.Stop()
	t.mu.Lock()
	for t.inflight > 0 && !t.gaveUp {
		t.idle.Wait()
	}
	left := t.inflight
	t.mu.Unlock()
	if left > 0 {
		l.log.Warn("reenqueue: partition released with produces in flight", "partition", t.partition, "inflight", left)
	}
}

// entry is one record read from the delay topic.
type entry struct {
	t         *tracker
	msg       *sarama.ConsumerMessage
	due       time.Time
	done      bool
	timer     *time.Timer // while held
	cancelled bool
}

// tracker marks a partition's offsets in order: an offset is marked once it
// and every offset before it have been produced somewhere (acknowledged).
type tracker struct {
	sess      sarama.ConsumerGroupSession
	ctx       context.Context
	topic     string
	partition int32

	mu       sync.Mutex
	idle     *sync.Cond
	queue    []*entry
	head     int
	inflight int
	gaveUp   bool
}

func (t *tracker) add(msg *sarama.ConsumerMessage, due time.Time) *entry {
	e := &entry{t: t, msg: msg, due: due}
	t.mu.Lock()
	t.queue = append(t.queue, e)
	t.mu.Unlock()
	return e
}

func (t *tracker) complete(e *entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.done = true
	last := int64(-1)
	for t.head < len(t.queue) && t.queue[t.head].done {
		last = t.queue[t.head].msg.Offset
		t.queue[t.head] = nil
		t.head++
	}
	if t.head > 1024 && t.head*2 > len(t.queue) {
		t.queue = append([]*entry(nil), t.queue[t.head:]...)
		t.head = 0
	}
	if last >= 0 {
		t.sess.MarkOffset(t.topic, t.partition, last+1, "")
	}
}

func (t *tracker) sending(delta int) {
	t.mu.Lock()
	t.inflight += delta
	if t.inflight == 0 {
		t.idle.Broadcast()
	}
	t.mu.Unlock()
}
