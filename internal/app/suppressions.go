package app

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lovoo/goka"
	gokacodec "github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/internal/suppress"
)

// suppressionView is the do-not-call list as this process reads it: a Goka
// view of the ivr-suppressions topic, held in memory by suppress's storage
// (an entry is the 32 bytes of its hash and a copy of its value: about
// 120 bytes of heap with a value of 40; docs/design.md). Every scheduler
// and dialer instance runs one; `ivrsched suppress` writes the topic. Get
// is safe for concurrent use: every partition goroutine of the scheduler
// and every placing worker of the dialer calls it.
type suppressionView struct {
	view *goka.View
	log  *slog.Logger

	mu     sync.Mutex
	stores []storage.Storage // one per partition
}

func newSuppressionView(cfg Config, log *slog.Logger) (*suppressionView, error) {
	sv := &suppressionView{log: log}
	build := func(topic string, partition int32) (storage.Storage, error) {
		st := suppress.NewStorage()
		sv.mu.Lock()
		sv.stores = append(sv.stores, st)
		sv.mu.Unlock()
		return st, nil
	}
	opts := append(cfg.Kafka.ViewOptions(),
		goka.WithViewStorageBuilder(build), // not Goka's memory storage: issue 33
		goka.WithViewAutoReconnect(),       // a lost broker is waited out, not fatal
		goka.WithViewLogger(gokaLogger{log}),
		goka.WithViewClientID(cfg.Kafka.ClientID+"-suppressions"),
	)
	v, err := goka.NewView(cfg.Kafka.Brokers, cfg.Topics.Suppressions, new(gokacodec.Bytes), opts...)
	if err != nil {
		return nil, fmt.Errorf("suppression view: %w", err)
	}
	sv.view = v
	return sv, nil
}

// Run keeps the view current until ctx ends. It logs how long the list
// took to read, and its size.
func (sv *suppressionView) Run(ctx context.Context) error {
	began := time.Now()
	go func() {
		select {
		case <-sv.Ready():
			sv.log.Info("do-not-call list read", "entries", sv.entries(), "took", time.Since(began).Round(time.Millisecond))
		case <-ctx.Done():
		}
	}()
	if err := sv.view.Run(ctx); err != nil {
		return fmt.Errorf("suppression view: %w", err)
	}
	return nil
}

// Ready is closed once the view has read the topic up to its end: no call
// is placed before the list is known.
func (sv *suppressionView) Ready() <-chan struct{} { return sv.view.WaitRunning() }

// entries is the number of entries the view holds.
func (sv *suppressionView) entries() int {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	n := 0
	for _, st := range sv.stores {
		n += suppress.Len(st)
	}
	return n
}

// Get returns the value stored under key (nil: none).
func (sv *suppressionView) Get(key string) ([]byte, error) {
	v, err := sv.view.Get(key)
	if err != nil || v == nil {
		return nil, err
	}
	b, ok := v.([]byte)
	if !ok {
		return nil, fmt.Errorf("suppression view: value of type %T", v)
	}
	return b, nil
}

// list is the checker the roles use.
func (sv *suppressionView) list(cfg Config, pv *policyView) *suppress.List {
	return &suppress.List{Get: sv.Get, Hasher: suppress.Hasher{Key: cfg.SuppressionKey}, Clock: cfg.Clock, Policy: pv.Current}
}

// both is closed once a and b are.
func both(a, b <-chan struct{}) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		<-a
		<-b
		close(c)
	}()
	return c
}
