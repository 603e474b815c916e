package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// commitRig runs roles on the embedded broker (two partitions, ivrsched's
// Kafka configuration) whose broker holds, once armed, the first produce
// that carries one topic until release.
type commitRig struct {
	t       *testing.T
	cluster *kfake.Cluster
	cfg     Config
	armed   atomic.Bool
	held    chan struct{}
	release func()
	ended   <-chan error

	producer sarama.SyncProducer
	admin    sarama.ClusterAdmin
}

func newCommitRig(t *testing.T, prefix string, cfg Config, hold func(topology.Topics) string) *commitRig {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	cfg.Kafka = kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: cluster.ListenAddrs(), Partitions: 2, Replication: 1, FlushFrequency: time.Millisecond}
	cfg.Topics = topology.NewTopics(prefix)
	cfg.DataDir = t.TempDir()
	cfg.SuppressionKey = testSuppressionKey
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	r := &commitRig{t: t, cluster: cluster, cfg: cfg, held: make(chan struct{})}
	release := make(chan struct{})
	var once sync.Once
	r.release = func() { once.Do(func() { close(release) }) }
	topic := hold(cfg.Topics)
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == topic && r.armed.CompareAndSwap(true, false) {
				close(r.held)
				cluster.SleepControl(func() { <-release })
			}
		}
		return nil, nil, false
	})
	return r
}

// run runs roles until t ends (releasing the held produce first).
func (r *commitRig) run(roles Roles) *Running {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	run, ended := runRolesReady(ctx, r.t, r.cfg, roles)
	r.ended = ended
	var err error
	if r.producer, err = sarama.NewSyncProducer(r.cfg.Kafka.Brokers, r.cfg.Kafka.Sarama()); err != nil {
		r.t.Fatal(err)
	}
	if r.admin, err = sarama.NewClusterAdmin(r.cfg.Kafka.Brokers, r.cfg.Kafka.Sarama()); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		r.release()
		r.admin.Close()
		r.producer.Close()
		cancel()
		if err := <-ended; err != nil {
			r.t.Errorf("run: %v", err)
		}
	})
	return run
}

// userOn is a user whose key is on partition part.
func userOn(part int32) string {
	for i := 0; ; i++ {
		if u := fmt.Sprintf("user-%d", i); topology.Partition(u, 2) == part {
			return u
		}
	}
}

// onboard gives user a follow-up due at once.
func (r *commitRig) onboard(user string) {
	r.t.Helper()
	v, err := new(codec.Command).Encode(&pb.Command{UserId: user, RequestedAt: timestamppb.Now(), Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
		Phone: "+14155550100", FollowUps: []*pb.FollowUp{{TaskId: "call", When: &pb.FollowUp_Delay{Delay: durationpb.New(10 * time.Millisecond)}}},
	}}})
	if err != nil {
		r.t.Fatal(err)
	}
	r.send(string(r.cfg.Topics.Onboarding), user, v)
}

// send writes value under key to topic and returns its partition and offset.
func (r *commitRig) send(topic, key string, value []byte) (int32, int64) {
	r.t.Helper()
	p, off, err := r.producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(value)})
	if err != nil {
		r.t.Fatalf("send to %s: %v", topic, err)
	}
	return p, off
}

// awaitHeld waits until the broker holds the produce.
func (r *commitRig) awaitHeld() {
	r.t.Helper()
	select {
	case <-r.held:
	case err := <-r.ended:
		r.t.Fatalf("run ended: %v", err)
	case <-time.After(30 * time.Second):
		r.t.Fatal("nothing held after 30s")
	}
}

// processed waits until p's partition part has processed topic up to off
// (Goka counts a record once its callback returned, after it marked a
// record that wrote nothing).
func (r *commitRig) processed(p *goka.Processor, part int32, topic string, off int64) {
	r.t.Helper()
	await(r.t, r.ended, fmt.Sprintf("%s/%d processed to %d", topic, part, off), func() bool {
		st, ok := p.Stats().Group[part]
		return ok && st.Input[topic] != nil && st.Input[topic].LastOffset >= off
	})
}

// committed is group's committed offsets of topic's two partitions.
func (r *commitRig) committed(group goka.Group, topic string) (p0, p1 int64) {
	r.t.Helper()
	resp, err := r.admin.ListConsumerGroupOffsets(string(group), map[string][]int32{topic: {0, 1}})
	if err != nil {
		r.t.Fatal(err)
	}
	return resp.GetBlock(topic, 0).Offset, resp.GetBlock(topic, 1).Offset
}

// awaitCommitAfter waits until group committed topic's partition 1 past
// off, and returns partition 0's committed offset of that time.
func (r *commitRig) awaitCommitAfter(group goka.Group, topic string, off int64) int64 {
	r.t.Helper()
	var p0 int64
	await(r.t, r.ended, fmt.Sprintf("%s/1 committed past %d", topic, off), func() bool {
		var p1 int64
		p0, p1 = r.committed(group, topic)
		return p1 > off
	})
	return p0
}

// heldBack checks that group's commits of topic's partition 0 stay at or
// before held (the record whose writes the broker holds) until release,
// although quiet, after it, was done: once the group committed partition 1
// past witness (sent after quiet was processed), partition 0 is committed
// at most up to held; once the broker takes the writes, past quiet.
func (r *commitRig) heldBack(group goka.Group, topic string, witness, held, quiet int64) {
	r.t.Helper()
	p0 := r.awaitCommitAfter(group, topic, witness)
	if p0 > held {
		r.t.Fatalf("%s of partition 0 committed up to %d, past the record at %d whose writes Kafka has not acknowledged", topic, p0, held)
	}
	r.t.Logf("%s of partition 0 committed up to %d while the writes of the record at %d are held (the quiet record at %d)", topic, p0, held, quiet)
	r.release()
	await(r.t, r.ended, "partition 0 committed past the quiet record once the writes are acknowledged", func() bool {
		p0, _ := r.committed(group, topic)
		return p0 > quiet
	})
}

// A tick that fires a call is not committed before Kafka acknowledged the
// call, even when later ticks, which fire nothing, are done at once: the
// scheduler, on the embedded broker with ivrsched's Kafka configuration,
// fires a follow-up while the broker holds every produce to ivr-calls, then
// gets a tick for that partition that fires nothing. Once the group has
// committed after that tick (seen by a tick for the other partition,
// committed later), the partition's committed offset is still at or before
// the tick that fired the call; once the broker takes the call, the
// commit moves past both.
func TestTickNotCommittedBeforeItsCall(t *testing.T) {
	r := newCommitRig(t, "held-", Config{}, func(t topology.Topics) string { return string(t.Calls) })
	ticks := string(r.cfg.Topics.Ticks)
	run := r.run(Roles{Scheduler: true})

	// A follow-up of a user on partition 0, due at once: its tick fires
	// the call, which the broker holds.
	r.armed.Store(true)
	r.onboard(userOn(0))
	r.awaitHeld()

	keys := topology.TickKeys(2)
	tick := func(part int32) int64 {
		t.Helper()
		v, err := new(codec.Tick).Encode(&pb.Tick{Partition: part, SentAt: timestamppb.Now()})
		if err != nil {
			t.Fatal(err)
		}
		p, off := r.send(ticks, keys[part], v)
		if p != part {
			t.Fatalf("tick for partition %d on %d", part, p)
		}
		return off
	}
	// A tick of partition 0 that fires nothing (the follow-up is fired),
	// done at once.
	quiet := tick(0)
	r.processed(run.roles[0].cur.Load(), 0, ticks, quiet)
	fired := run.Scheduler.Punctuator().Index(0).Mark().LastTick
	if fired < 0 || fired >= quiet {
		t.Fatalf("the tick that fired the call is at %d, the quiet one at %d", fired, quiet)
	}
	// A group commit after the quiet tick's: a tick of partition 1 sent
	// after it, committed.
	r.heldBack(r.cfg.Topics.Scheduler, ticks, tick(1), fired, quiet)
}

// The dialer's loop likewise: a call's answer is recorded and its result
// published while the broker holds every produce to ivr-results; a later
// answer of the same call (late: the call is final) records nothing and is
// done at once. Once the group has committed after it (a late answer on
// the other partition), the loop's partition is committed at most up to
// the answer whose result is held.
func TestDialerStatusNotCommittedBeforeItsResult(t *testing.T) {
	prov := &placed{n: make(chan struct{}, 8)}
	r := newCommitRig(t, "loop-", Config{Provider: prov}, func(t topology.Topics) string { return string(t.Results) })
	loop := string(r.cfg.Topics.DialerLoop())
	run := r.run(Roles{Scheduler: true, Dialer: true})
	dialer := run.roles[1]
	recorded := func(user string) *pb.DialRecord {
		v, err := dialer.get(user)
		if st, ok := v.(*pb.DialerState); err == nil && ok && len(st.GetCalls()) > 0 && st.GetCalls()[0].GetFinal() {
			return st.GetCalls()[0]
		}
		return nil
	}
	late := func(user string) int64 {
		t.Helper()
		rec := recorded(user)
		v, err := new(codec.CallStatus).Encode(&pb.CallStatus{CallId: rec.GetCallId(), UserId: user, Outcome: pb.Outcome_OUTCOME_PLACED, Final: true, At: timestamppb.Now()})
		if err != nil {
			t.Fatal(err)
		}
		_, off := r.send(loop, user, v)
		return off
	}

	// A user on partition 1 whose call is placed and its result written
	// (its answer committed).
	b := userOn(1)
	r.onboard(b)
	await(t, r.ended, "the first answer committed", func() bool {
		_, p1 := r.committed(r.cfg.Topics.Dialer, loop)
		return p1 > 0 && recorded(b) != nil
	})
	// A user on partition 0 whose call's result the broker holds.
	a := userOn(0)
	r.armed.Store(true)
	r.onboard(a)
	r.awaitHeld()
	await(t, r.ended, "the held answer recorded", func() bool { return recorded(a) != nil })
	answer := recorded(a).GetStatusOffset()

	quiet := late(a)
	r.processed(dialer.cur.Load(), 0, loop, quiet)
	if n := run.Dialer.Stats.Late.Load(); n != 1 {
		t.Fatalf("%d late answers, want 1", n)
	}
	r.heldBack(r.cfg.Topics.Dialer, loop, late(b), answer, quiet)
}
