package kafkaclient

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
)

// sessionLog is a consumer group whose sessions, as Goka gets them, log
// Setup's return, Cleanup's start and end, and each mark.
type sessionLog struct {
	sarama.ConsumerGroup
	log *eventLog
}

type eventLog struct {
	mu     sync.Mutex
	events []string
	news   chan string
}

func newEventLog() *eventLog { return &eventLog{news: make(chan string, 64)} }

func (l *eventLog) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
	l.news <- e
}

func (l *eventLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// awaitAll waits until every one of es is logged, in any order.
func (l *eventLog) awaitAll(t *testing.T, es ...string) {
	t.Helper()
	l.awaitThat(t, fmt.Sprintf("%q", es), func(events []string) bool {
		for _, e := range es {
			if !slices.Contains(events, e) {
				return false
			}
		}
		return true
	})
}

// awaitThat waits until the events logged so far satisfy ok.
func (l *eventLog) awaitThat(t *testing.T, what string, ok func(events []string) bool) {
	t.Helper()
	for !ok(l.all()) {
		within(t, l.news, what)
	}
}

// await waits until e is logged.
func (l *eventLog) await(t *testing.T, e string) {
	t.Helper()
	for within(t, l.news, e) != e {
	}
}

func (g sessionLog) Consume(ctx context.Context, topics []string, h sarama.ConsumerGroupHandler) error {
	return g.ConsumerGroup.Consume(ctx, topics, logHandler{h: h, log: g.log})
}

type logHandler struct {
	h   sarama.ConsumerGroupHandler
	log *eventLog
}

func (h logHandler) Setup(s sarama.ConsumerGroupSession) error {
	defer h.log.add("setup returned")
	return h.h.Setup(logSession{s, h.log})
}

func (h logHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	return h.h.ConsumeClaim(logSession{s, h.log}, c)
}

func (h logHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	h.log.add("cleanup")
	defer h.log.add("cleanup returned")
	return h.h.Cleanup(logSession{s, h.log})
}

type logSession struct {
	sarama.ConsumerGroupSession
	log *eventLog
}

func (s logSession) MarkOffset(topic string, part int32, next int64, meta string) {
	s.log.add("mark")
	s.ConsumerGroupSession.MarkOffset(topic, part, next, meta)
}

// loggedProcessor runs a processor of group with one input "in" whose
// callback emits to "out" and writes its table, logging its sessions.
func loggedProcessor(t *testing.T, k Kafka, group string, log *eventLog, st storage.Storage) (cancel func(), done <-chan error) {
	t.Helper()
	g := goka.DefineGroup(goka.Group(group),
		goka.Input("in", new(codec.String), func(ctx goka.Context, msg any) {
			ctx.Emit("out", ctx.Key(), msg)
		}),
		goka.Output("out", new(codec.String)),
		goka.Persist(new(codec.String)))
	opts := append(k.ProcessorOptions(),
		goka.WithConsumerGroupBuilder(func(brokers []string, group, clientID string) (sarama.ConsumerGroup, error) {
			cg, err := k.ConsumerGroupBuilder(brokers, group, clientID)
			return sessionLog{ConsumerGroup: cg, log: log}, err
		}),
		goka.WithStorageBuilder(func(string, int32) (storage.Storage, error) { return st, nil }))
	p, err := goka.NewProcessor(k.Brokers, g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	go func() { ended <- p.Run(ctx) }()
	t.Cleanup(stop)
	return stop, ended
}

// recoveryLog is a memory storage that logs MarkRecovered.
type recoveryLog struct {
	storage.Storage
	log *eventLog
}

func (s recoveryLog) MarkRecovered() error {
	s.log.add("recovered")
	return s.Storage.MarkRecovered()
}

// Goka restores a session's partitions inside the session's Setup: a
// partition's MarkRecovered comes before Setup returns (placement relies
// on the session being live at MarkRecovered; early_claims.go
// lets the claims start meanwhile).
func TestMarkRecoveredRunsInsideSetup(t *testing.T) {
	_, k := broker(t)
	topics(t, k, "in", "out", "inside-table")
	log := newEventLog()
	cancel, done := loggedProcessor(t, k, "inside", log, recoveryLog{storage.NewMemory(), log})
	log.await(t, "setup returned")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("processor: %v", err)
	}
	if got := log.all(); len(got) < 2 || !slices.Equal(got[:2], []string{"recovered", "setup returned"}) {
		t.Fatalf("events %v, want MarkRecovered, then Setup's return", got)
	}
}

// When a session ends, Goka's Cleanup waits for the callbacks whose emits
// are in flight (up to 60 s) and marks them before it returns, so Sarama's
// last commit of the session has them (HoldCommits ends a
// session's marks after Cleanup).
func TestCleanupWaitsForInFlightEmits(t *testing.T) {
	c, k := broker(t)
	topics(t, k, "in", "out", "waits-table")
	log := newEventLog()
	cancel, done := loggedProcessor(t, k, "waits", log, storage.NewMemory())
	held, release := holdProduce(t, c, "out")
	produce(t, k, "in", "key", "v")
	within(t, held, "the emit held by the broker")
	cancel()
	log.await(t, "cleanup")
	release()
	if err := <-done; err != nil {
		t.Fatalf("processor: %v", err)
	}
	got := log.all()
	i := slices.Index(got, "cleanup")
	if want := []string{"cleanup", "mark", "cleanup returned"}; !slices.Equal(got[i:], want) {
		t.Fatalf("events %v, want at the end %v", got, want)
	}
}
