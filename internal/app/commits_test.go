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
	"github.com/ivrsched/ivrsched/topology"
)

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
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cfg := Config{
		Kafka:   topology.Kafka{Brokers: cluster.ListenAddrs(), Partitions: 2, Replication: 1, FlushFrequency: time.Millisecond},
		Topics:  topology.NewTopics("held-"),
		DataDir: t.TempDir(),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	calls, ticks := string(cfg.Topics.Calls), string(cfg.Topics.Ticks)

	// The broker holds the first produce that carries a call until release.
	var armed atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseCalls := func() { releaseOnce.Do(func() { close(release) }) }
	defer releaseCalls()
	cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == calls && armed.CompareAndSwap(true, false) {
				close(held)
				cluster.SleepControl(func() { <-release })
			}
		}
		return nil, nil, false
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run, ended := runRolesReady(ctx, t, cfg, Roles{Scheduler: true})
	defer func() {
		releaseCalls()
		cancel()
		if err := <-ended; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	// A follow-up of a user on partition 0, due at once: its tick fires
	// the call, which the broker holds.
	user := ""
	for i := 0; user == ""; i++ {
		if u := fmt.Sprintf("user-%d", i); topology.Partition(u, 2) == 0 {
			user = u
		}
	}
	armed.Store(true)
	em, err := goka.NewEmitter(cfg.Kafka.Brokers, cfg.Topics.Onboarding, new(codec.Command), cfg.Kafka.EmitterOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := em.Emit(user, &pb.Command{UserId: user, RequestedAt: timestamppb.Now(), Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
		Phone: "+14155550100", FollowUps: []*pb.FollowUp{{TaskId: "call", When: &pb.FollowUp_Delay{Delay: durationpb.New(10 * time.Millisecond)}}},
	}}}); err != nil {
		t.Fatal(err)
	}
	if err := em.Finish(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no call produced after 30s")
	}

	producer, err := sarama.NewSyncProducer(cfg.Kafka.Brokers, cfg.Kafka.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	keys := topology.TickKeys(2)
	tick := func(part int32) int64 {
		t.Helper()
		v, err := new(codec.Tick).Encode(&pb.Tick{Partition: part, SentAt: timestamppb.Now()})
		if err != nil {
			t.Fatal(err)
		}
		p, off, err := producer.SendMessage(&sarama.ProducerMessage{Topic: ticks, Key: sarama.StringEncoder(keys[part]), Value: sarama.ByteEncoder(v)})
		if err != nil || p != part {
			t.Fatalf("tick for partition %d: on %d, %v", part, p, err)
		}
		return off
	}

	// A tick of partition 0 that fires nothing (the follow-up is fired),
	// done at once.
	quiet := tick(0)
	proc := run.roles[0].cur.Load()
	await(t, ended, "the quiet tick processed", func() bool {
		st, ok := proc.Stats().Group[0]
		return ok && st.Input[ticks] != nil && st.Input[ticks].LastOffset >= quiet
	})
	fired := run.Scheduler.Punctuator().Index(0).Mark().LastTick
	if fired < 0 || fired >= quiet {
		t.Fatalf("the tick that fired the call is at %d, the quiet one at %d", fired, quiet)
	}
	// A group commit after the quiet tick's: a tick of partition 1 sent
	// after it, committed.
	other := tick(1)
	admin, err := sarama.NewClusterAdmin(cfg.Kafka.Brokers, cfg.Kafka.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	committed := func() (p0, p1 int64) {
		t.Helper()
		resp, err := admin.ListConsumerGroupOffsets(string(cfg.Topics.Scheduler), map[string][]int32{ticks: {0, 1}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetBlock(ticks, 0).Offset, resp.GetBlock(ticks, 1).Offset
	}
	var p0 int64
	await(t, ended, "the other partition's tick committed", func() bool {
		var p1 int64
		p0, p1 = committed()
		return p1 > other
	})
	if p0 > fired {
		t.Fatalf("ticks of partition 0 committed up to %d, past the tick at %d whose call Kafka has not acknowledged", p0, fired)
	}
	t.Logf("ticks of partition 0 committed up to %d while the call of the tick at %d is held (quiet tick at %d)", p0, fired, quiet)

	releaseCalls()
	await(t, ended, "partition 0 committed past the quiet tick once the call is written", func() bool {
		p0, _ := committed()
		return p0 > quiet
	})
}
