package kafkaclient

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
)

// Goka closes every partition's local store when a group session ends (a
// rebalance) and builds and opens the store of each partition assigned in
// the next session, those that stayed with this instance too: a store is
// never kept open across a rebalance. processors/scheduler/dueindex/kept.go
// relies on it (it keeps a closed partition's due index for its next
// open). Here processor A owns both partitions alone; B joins the group, A
// keeps one partition and gives up the other: both of A's stores close,
// and the one it kept is built and opened again.
func TestGokaClosesAndReopensStoresAtEachRebalance(t *testing.T) {
	_, k := broker(t)
	k.Partitions = 2
	// A learns of the rebalance at its next heartbeat, a tenth of the
	// session timeout (6 s: the least the broker allows).
	k.SessionTimeout = 6 * time.Second
	topics(t, k, "in", "stores-table")
	log := newEventLog()
	stopA := storesProcessor(t, k, "A", log)
	defer stopA()
	log.awaitAll(t, "A opened 0", "A opened 1")
	stopB := storesProcessor(t, k, "B", log)
	defer stopB()
	log.awaitAll(t, "A closed 0", "A closed 1")
	// B opens the partition it took; A opens the one it kept again.
	kept := int32(-1)
	log.awaitThat(t, "B's store and A's store opened again", func(events []string) bool {
		for _, e := range events {
			var moved int32
			if _, err := fmt.Sscanf(e, "B opened %d", &moved); err == nil {
				kept = 1 - moved
				return slices.Contains(events, fmt.Sprintf("A opened %d again", kept))
			}
		}
		return false
	})
	var ofKept []string
	for _, e := range log.all() {
		var who, verb string
		var part int32
		if _, err := fmt.Sscanf(e, "%s %s %d", &who, &verb, &part); err == nil && who == "A" && part == kept {
			ofKept = append(ofKept, e)
		}
	}
	want := []string{fmt.Sprintf("A opened %d", kept), fmt.Sprintf("A closed %d", kept), fmt.Sprintf("A opened %d again", kept)}
	if !slices.Equal(ofKept, want) {
		t.Fatalf("A's store of the partition it kept: %q, want %q", ofKept, want)
	}
}

// storesProcessor runs processor name of group "stores" (input "in", a
// table) with ivrsched's options, logging "<name> opened <partition>"
// (" again" for a partition opened before), and "<name> closed
// <partition>", for each of its stores.
func storesProcessor(t *testing.T, k Kafka, name string, log *eventLog) (stop func()) {
	t.Helper()
	g := goka.DefineGroup("stores",
		goka.Input("in", new(codec.String), func(goka.Context, any) {}),
		goka.Persist(new(codec.String)))
	var (
		mu     sync.Mutex
		opened = map[int32]bool{}
	)
	build := func(_ string, part int32) (storage.Storage, error) {
		return &loggedStore{Storage: storage.NewMemory(), opened: func() {
			mu.Lock()
			again := opened[part]
			opened[part] = true
			mu.Unlock()
			e := fmt.Sprintf("%s opened %d", name, part)
			if again {
				e += " again"
			}
			log.add(e)
		}, closed: func() { log.add(fmt.Sprintf("%s closed %d", name, part)) }}, nil
	}
	p, err := goka.NewProcessor(k.Brokers, g, append(k.ProcessorOptions(), goka.WithStorageBuilder(build))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return func() {
		cancel()
		// Stopped while it joins, Goka reports Sarama's context error.
		if err := within(t, done, "processor "+name+" stopping"); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("processor %s: %v", name, err)
		}
	}
}

// loggedStore is a store that tells when it is opened and closed.
type loggedStore struct {
	storage.Storage
	opened, closed func()
}

func (s *loggedStore) Open() error {
	s.opened()
	return s.Storage.Open()
}

func (s *loggedStore) Close() error {
	s.closed()
	return s.Storage.Close()
}

// Goka waits a fixed 5 s before it joins its group again after a session
// ended (Sarama's Consume returned: a rebalance, a lost coordinator), and
// while it waits, the group's next rebalance waits for it.
// ConsumerGroupBuilder's rejoining (rejoin.go) takes that pause out. Here
// the group is Sarama's as Goka builds it with ivrsched's configuration,
// without rejoining; its first session is ended once set up, the way a
// rebalance ends it, and the test measures the time from that Consume's
// return to Goka's next Consume call.
func TestGokaWaitsFiveSecondsBeforeItJoinsAgain(t *testing.T) {
	_, k := broker(t)
	topics(t, k, "in")
	g := goka.DefineGroup("pause", goka.Input("in", new(codec.String), func(goka.Context, any) {}))
	group := &endingGroup{returned: make(chan time.Time, 1), called: make(chan time.Time, 1)}
	opts := append(k.ProcessorOptions(),
		goka.WithConsumerGroupBuilder(func(brokers []string, name, clientID string) (sarama.ConsumerGroup, error) {
			cg, err := goka.ConsumerGroupBuilderWithConfig(k.Sarama())(brokers, name, clientID)
			group.ConsumerGroup = cg
			return group, err
		}))
	p, err := goka.NewProcessor(k.Brokers, g, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		// Stopped while it joins, Goka reports Sarama's context error.
		if err := within(t, done, "the processor stopping"); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("processor: %v", err)
		}
	}()
	returned := within(t, group.returned, "the end of the first session")
	called := within(t, group.called, "Goka's next Consume")
	// time.After(5 * time.Second) in Goka's Processor.rebalanceLoop: never
	// sooner, and later only by the scheduling of a loaded machine.
	if pause := called.Sub(returned); pause < 5*time.Second-50*time.Millisecond || pause > 7*time.Second {
		t.Fatalf("Goka called Consume again %v after the session ended, want 5 s", pause)
	}
}

// endingGroup ends its first session once Goka's Setup returned, as a
// rebalance ends one, and tells when that Consume returned and when Goka
// called Consume next. Goka calls Consume from one goroutine.
type endingGroup struct {
	sarama.ConsumerGroup
	calls            int
	returned, called chan time.Time
}

func (g *endingGroup) Consume(ctx context.Context, topics []string, h sarama.ConsumerGroupHandler) error {
	g.calls++
	if g.calls > 1 {
		if g.calls == 2 {
			g.called <- time.Now()
		}
		return g.ConsumerGroup.Consume(ctx, topics, h)
	}
	session, end := context.WithCancel(ctx)
	defer end()
	err := g.ConsumerGroup.Consume(session, topics, endAfterSetup{ConsumerGroupHandler: h, end: end})
	g.returned <- time.Now()
	return err
}

// endAfterSetup ends its session once the handler's Setup returned.
type endAfterSetup struct {
	sarama.ConsumerGroupHandler
	end context.CancelFunc
}

func (h endAfterSetup) Setup(s sarama.ConsumerGroupSession) error {
	defer h.end()
	return h.ConsumerGroupHandler.Setup(s)
}
