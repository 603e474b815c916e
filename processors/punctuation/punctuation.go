// Package punctuation fires what is due in the scheduler's table at a cost
// proportional to what is due, not to the table size.
//
// Goka has no timers, so punctuation is built from three parts:
//
//   - a storage wrapper that keeps a due Index for every table partition this
//     instance owns; it sees every Set and Delete (changelog recovery goes
//     through Set too) and rebuilds the index from the local store on Open;
//   - a Punctuator goroutine that sends a tick to a partition of the ticks
//     topic when that partition's earliest due time arrives (and a slow
//     heartbeat otherwise), at most one tick in flight per partition;
//   - the scheduler's tick callback, which takes the due users from the
//     partition's Index and loops a fire message back to each user, so every
//     table write happens in the callback for that user's key.
package punctuation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/internal/clock"
)

// Config configures a Punctuator.
type Config struct {
	// Table is the topic of the group table to index.
	Table string
	// Earliest extracts the earliest due time from a table value;
	// ok=false when nothing is pending.
	Earliest func(value []byte) (due time.Time, ok bool, err error)
	// Send produces a tick to the given partition of the ticks topic. It
	// should not block on the broker's acknowledgement.
	Send  func(partition int32) error
	Clock clock.Clock
	// MinGap is the shortest time between two ticks of one partition.
	MinGap time.Duration
	// Heartbeat is the longest time between two ticks of one partition.
	Heartbeat time.Duration
	// TickTimeout is how long a tick may go unanswered before another is sent.
	TickTimeout time.Duration
	Logger      *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.MinGap <= 0 {
		c.MinGap = 2 * time.Millisecond
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = time.Second
	}
	if c.TickTimeout <= 0 {
		c.TickTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Table == "":
		return errors.New("punctuation: no table topic")
	case c.Earliest == nil:
		return errors.New("punctuation: no Earliest function")
	}
	return nil
}

// Punctuator owns the due indexes of this instance's partitions and sends
// their ticks.
type Punctuator struct {
	cfg  Config
	wake chan struct{}

	mu    sync.Mutex
	parts map[int32]*partition
}

type partition struct {
	index       *Index
	lastSent    time.Time
	outstanding bool
}

// New returns a Punctuator. Run must be called for ticks to be sent.
func New(cfg Config) (*Punctuator, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Punctuator{cfg: cfg, wake: make(chan struct{}, 1), parts: make(map[int32]*partition)}, nil
}

// Index returns the due index of an owned partition, or nil.
func (p *Punctuator) Index(part int32) *Index {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.parts[part]; s != nil {
		return s.index
	}
	return nil
}

// Ticked tells the punctuator that a tick of the partition was processed.
func (p *Punctuator) Ticked(part int32) {
	p.mu.Lock()
	if s := p.parts[part]; s != nil {
		s.outstanding = false
	}
	p.mu.Unlock()
	p.poke()
}

func (p *Punctuator) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run sends ticks until ctx ends.
func (p *Punctuator) Run(ctx context.Context) error {
	if p.cfg.Send == nil {
		return errors.New("punctuation: no Send function")
	}
	for {
		wait := p.round()
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		case <-p.cfg.Clock.After(wait):
		}
	}
}

// round sends the ticks that are due and returns how long to wait for the next.
func (p *Punctuator) round() time.Duration {
	now := p.cfg.Clock.Now()
	next := now.Add(p.cfg.Heartbeat) // idle: nothing owned
	p.mu.Lock()
	if len(p.parts) > 0 {
		next = now.Add(p.cfg.Heartbeat + p.cfg.TickTimeout)
	}
	var send []int32
	for id, s := range p.parts {
		at := p.tickAt(s)
		if !at.After(now) {
			send = append(send, id)
			s.lastSent, s.outstanding = now, true
			at = now.Add(p.cfg.TickTimeout)
		}
		if at.Before(next) {
			next = at
		}
	}
	p.mu.Unlock()
	for _, id := range send {
		if err := p.cfg.Send(id); err != nil {
			p.cfg.Logger.Warn("send tick", "partition", id, "err", err)
			p.mu.Lock()
			if s := p.parts[id]; s != nil {
				s.outstanding = false
			}
			p.mu.Unlock()
		}
	}
	return next.Sub(now)
}

// tickAt is when the partition's next tick should go out.
func (p *Punctuator) tickAt(s *partition) time.Time {
	if s.outstanding {
		return s.lastSent.Add(p.cfg.TickTimeout)
	}
	at := s.lastSent.Add(p.cfg.Heartbeat)
	if due, ok := s.index.Next(); ok && due.Before(at) {
		at = due
	}
	if gap := s.lastSent.Add(p.cfg.MinGap); at.Before(gap) {
		at = gap
	}
	return at
}

func (p *Punctuator) register(part int32, x *Index) {
	p.mu.Lock()
	p.parts[part] = &partition{index: x}
	p.mu.Unlock()
	p.poke()
}

func (p *Punctuator) unregister(part int32, x *Index) {
	p.mu.Lock()
	if s := p.parts[part]; s != nil && s.index == x {
		delete(p.parts, part)
	}
	p.mu.Unlock()
}

// StorageBuilder wraps inner so that every partition of the table gets a due
// index fed by its writes. Other topics' storages are returned unwrapped.
func (p *Punctuator) StorageBuilder(inner storage.Builder) storage.Builder {
	return func(topic string, part int32) (storage.Storage, error) {
		st, err := inner(topic, part)
		if err != nil || topic != p.cfg.Table {
			return st, err
		}
		return &indexed{Storage: st, p: p, part: part}, nil
	}
}

// indexed is a table partition's storage that keeps its Index current.
type indexed struct {
	storage.Storage
	p     *Punctuator
	part  int32
	index *Index
}

func (s *indexed) Open() error {
	if err := s.Storage.Open(); err != nil {
		return err
	}
	s.index = NewIndex(func(time.Time) { s.p.poke() })
	it, err := s.Storage.Iterator()
	if err != nil {
		return fmt.Errorf("index partition %d: %w", s.part, err)
	}
	defer it.Release()
	n := 0
	for it.Next() {
		v, err := it.Value()
		if err != nil {
			return fmt.Errorf("index partition %d: %w", s.part, err)
		}
		s.update(string(it.Key()), v)
		n++
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("index partition %d: %w", s.part, err)
	}
	s.p.cfg.Logger.Debug("due index opened", "table", s.p.cfg.Table, "partition", s.part, "keys", n, "pending_users", s.index.Len())
	s.p.register(s.part, s.index)
	return nil
}

func (s *indexed) Close() error {
	s.p.unregister(s.part, s.index)
	return s.Storage.Close()
}

func (s *indexed) Set(key string, value []byte) error {
	if err := s.Storage.Set(key, value); err != nil {
		return err
	}
	s.update(key, value)
	return nil
}

func (s *indexed) Delete(key string) error {
	if err := s.Storage.Delete(key); err != nil {
		return err
	}
	s.index.Update(key, time.Time{}, false)
	return nil
}

func (s *indexed) update(key string, value []byte) {
	due, ok, err := s.p.cfg.Earliest(value)
	if err != nil {
		s.p.cfg.Logger.Error("unreadable table value, not indexed", "table", s.p.cfg.Table, "partition", s.part, "key", key, "err", err)
	}
	s.index.Update(key, due, ok && err == nil)
}
