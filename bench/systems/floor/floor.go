// Package floor is the benchmark's one-hop floor: a producer in the
// harness's process writes each task's record at its due time, and the same
// observer as the other systems' measures when it arrives. Its lateness is
// what one trip through the broker costs on this machine at this moment,
// for the same rate and record size (an ivrsched IVRCall with the task's
// payload): the other systems' lateness is read as a ratio to it, measured
// in the same run. ivrsched's path is two such hops (a tick, then the call).
package floor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/bench/harness"
	"github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// System is the floor as a harness.System. It has nothing to kill: it
// implements harness.Floor, and the harness skips its kill -9 phase.
type System struct {
	name    string
	brokers []string
	topic   string

	mu       sync.Mutex
	producer sarama.AsyncProducer
	wg       sync.WaitGroup // the due-time loops of Schedule
	errs     []error        // produce errors, reported by Stop
	stop     context.CancelFunc
	ctx      context.Context
}

// New returns the floor named name; its topic is name + "-calls".
func New(name string) *System { return &System{name: name} }

// Name is part of harness.System.
func (s *System) Name() string { return s.name }

// Floor marks the system as the run's one-hop floor.
func (s *System) Floor() bool { return true }

// config is the producer of ivrsched's benchmark clients and of its own
// scheduler's calls: acknowledged by all replicas, batches flushed every
// millisecond, keyed by user with Kafka's partitioner.
func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_6_0_0
	c.Producer.Return.Successes = false
	c.Producer.Return.Errors = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Partitioner = sarama.NewCustomHashPartitioner(topology.Murmur2())
	c.Producer.Flush.Frequency = time.Millisecond
	c.Producer.Flush.Messages = 500
	c.Producer.Retry.Max = 40
	c.Producer.Retry.Backoff = 250 * time.Millisecond
	c.ChannelBufferSize = 4096
	return c
}

// Start creates the topic and the producer.
func (s *System) Start(ctx context.Context, env harness.Env) error {
	for b := range strings.SplitSeq(env.KafkaBrokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			s.brokers = append(s.brokers, b)
		}
	}
	s.topic = s.name + "-calls"
	parts := max(env.Partitions, 1)
	spec := []topology.TopicSpec{{Name: s.topic, Retain: time.Hour}}
	if err := topology.EnsureTopics(ctx, kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: s.brokers, Partitions: parts, Replication: 1}, spec); err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	p, err := sarama.NewAsyncProducer(s.brokers, config())
	if err != nil {
		return fmt.Errorf("floor: producer: %w", err)
	}
	s.producer = p
	s.ctx, s.stop = context.WithCancel(context.Background())
	go func() {
		for e := range p.Errors() {
			s.mu.Lock()
			s.errs = append(s.errs, e.Err)
			s.mu.Unlock()
		}
	}()
	return nil
}

// Schedule accepts the tasks at once (they are held in memory) and
// produces each one's record at its due time, in a goroutine of its own.
func (s *System) Schedule(ctx context.Context, tasks []harness.Task) error {
	if s.producer == nil {
		return errors.New("floor: not started")
	}
	ts := slices.Clone(tasks)
	slices.SortStableFunc(ts, func(a, b harness.Task) int { return a.Due.Compare(b.Due) })
	msgs := make([]*sarama.ProducerMessage, len(ts))
	for i, t := range ts {
		b, err := proto.Marshal(call(t))
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		msgs[i] = &sarama.ProducerMessage{Topic: s.topic, Key: sarama.StringEncoder(t.User), Value: sarama.ByteEncoder(b)}
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.fire(ts, msgs)
	}()
	return nil
}

// call is the record ivrsched's scheduler would publish for t (fired_at is
// set when it is produced).
func call(t harness.Task) *ivrschedpb.IVRCall {
	return &ivrschedpb.IVRCall{
		CallId: fmt.Sprintf("%s/%s/%d/0", t.User, t.ID, t.Due.UnixMilli()), UserId: t.User, TaskId: t.ID,
		Phone: "+14155550100", TimeZone: "America/Los_Angeles", DueAt: timestamppb.New(t.Due),
		FiredAt: timestamppb.New(t.Due), Action: &ivrschedpb.Action{IvrScript: "bench"}, Payload: t.Payload,
		OnboardedAt: timestamppb.New(t.Due.Add(-time.Minute)),
	}
}

// fire produces msgs[i] at ts[i].Due, every record already due at once.
func (s *System) fire(ts []harness.Task, msgs []*sarama.ProducerMessage) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i := 0; i < len(ts); {
		if wait := time.Until(ts[i].Due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-s.ctx.Done():
				return
			case <-timer.C:
			}
			continue
		}
		select {
		case s.producer.Input() <- msgs[i]:
			i++
		case <-s.ctx.Done():
			return
		}
	}
}

// Observe consumes the topic from the start: every record is a fire.
func (s *System) Observe(ctx context.Context, out chan<- harness.Fire) error {
	return harness.ObserveTopic(ctx, s.brokers, s.topic, out, func(m *sarama.ConsumerMessage) (harness.Fire, bool) {
		var c ivrschedpb.IVRCall
		if proto.Unmarshal(m.Value, &c) != nil {
			return harness.Fire{}, false
		}
		return harness.Fire{ID: c.GetTaskId(), Due: c.GetDueAt().AsTime()}, true
	})
}

// PIDs is empty: the producer runs in the harness's process, whose CPU
// would include the observers'. The broker's CPU is counted as for the
// other Kafka systems.
func (s *System) PIDs() []int { return nil }

// Crash is refused: the floor has no process of its own (see Floor).
func (s *System) Crash() error { return errors.New("floor: nothing to kill") }

// Recover is refused, as Crash.
func (s *System) Recover(context.Context) error { return errors.New("floor: nothing to restart") }

// Stop ends the due-time loops, flushes the producer and reports its errors.
func (s *System) Stop() error {
	if s.producer == nil {
		return nil
	}
	s.stop()
	s.wg.Wait()
	err := s.producer.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) > 0 {
		err = errors.Join(err, fmt.Errorf("floor: %d records not produced, the first: %w", len(s.errs), s.errs[0]))
	}
	return err
}
