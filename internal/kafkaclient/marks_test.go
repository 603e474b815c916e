package kafkaclient

import (
	"context"
	"testing"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
)

// markRecorder is a consumer group whose sessions, as Goka gets them,
// report each mark (the next offset) on marks before Sarama takes it.
type markRecorder struct {
	sarama.ConsumerGroup
	marks chan<- int64
}

func (g markRecorder) Consume(ctx context.Context, topics []string, h sarama.ConsumerGroupHandler) error {
	return g.ConsumerGroup.Consume(ctx, topics, markHandler{h: h, marks: g.marks})
}

type markHandler struct {
	h     sarama.ConsumerGroupHandler
	marks chan<- int64
}

func (h markHandler) Setup(s sarama.ConsumerGroupSession) error {
	return h.h.Setup(markSession{s, h.marks})
}

func (h markHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	return h.h.ConsumeClaim(markSession{s, h.marks}, c)
}

func (h markHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	return h.h.Cleanup(markSession{s, h.marks})
}

type markSession struct {
	sarama.ConsumerGroupSession
	marks chan<- int64
}

func (s markSession) MarkOffset(topic string, part int32, next int64, meta string) {
	s.marks <- next
	s.ConsumerGroupSession.MarkOffset(topic, part, next, meta)
}

func (s markSession) MarkMessage(m *sarama.ConsumerMessage, meta string) {
	s.MarkOffset(m.Topic, m.Partition, m.Offset+1, meta)
}

// Goka marks an input record (MarkOffset with its offset + 1, on the
// session its Setup got) once the callback returned and every emit of that
// record was acknowledged, and not otherwise in order: a later record that
// emits nothing is marked while an earlier one's emit is held by the
// broker. HoldCommits (heldcommits.go) exists because of this.
func TestGokaMarksARecordOnceItsOwnEmitsAreAcknowledged(t *testing.T) {
	c, k := broker(t)
	topics(t, k, "in", "out")
	marks := make(chan int64, 16)
	g := goka.DefineGroup("marks",
		goka.Input("in", new(codec.String), func(ctx goka.Context, msg any) {
			if msg.(string) == "emit" {
				ctx.Emit("out", ctx.Key(), "x")
			}
		}),
		goka.Output("out", new(codec.String)))
	opts := append(k.ProcessorOptions(), goka.WithConsumerGroupBuilder(func(brokers []string, group, clientID string) (sarama.ConsumerGroup, error) {
		cg, err := k.ConsumerGroupBuilder(brokers, group, clientID)
		return markRecorder{ConsumerGroup: cg, marks: marks}, err
	}))
	p, err := goka.NewProcessor(k.Brokers, g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	held, release := holdProduce(t, c, "out")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		release()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("processor: %v", err)
		}
	}()

	offs := produce(t, k, "in", "key", "emit", "quiet")
	within(t, held, "the emit held by the broker")
	if m := within(t, marks, "the first mark"); m != offs[1]+1 {
		t.Fatalf("first mark %d, want %d: the later record, which emits nothing, while the earlier one's emit is held", m, offs[1]+1)
	}
	release()
	if m := within(t, marks, "the second mark"); m != offs[0]+1 {
		t.Fatalf("second mark %d, want %d: the earlier record, once its emit is acknowledged", m, offs[0]+1)
	}
}

// firstClaim marks the given offsets on the first claim, in order, and
// returns (which ends the session, and Sarama commits what was marked).
type firstClaim struct{ marks []int64 }

func (firstClaim) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (firstClaim) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h firstClaim) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for _, m := range h.marks {
		s.MarkOffset(c.Topic(), c.Partition(), m, "")
	}
	return nil
}

// Sarama commits the highest offset marked in a session: a lower mark
// after a higher one changes nothing. So a commit passes every record
// below the highest mark, marked or not (HoldCommits).
func TestSaramaCommitsTheHighestMark(t *testing.T) {
	_, k := broker(t)
	topics(t, k, "in")
	produce(t, k, "in", "key", "a", "b", "c", "d", "e")
	cg, err := sarama.NewConsumerGroup(k.Brokers, "highest", k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	if err := cg.Consume(context.Background(), []string{"in"}, firstClaim{marks: []int64{4, 2}}); err != nil {
		t.Fatal(err)
	}
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	resp, err := admin.ListConsumerGroupOffsets("highest", map[string][]int32{"in": {0}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetBlock("in", 0).Offset; got != 4 {
		t.Fatalf("committed %d after marks 4 then 2, want 4", got)
	}
}
