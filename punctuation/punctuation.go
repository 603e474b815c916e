// Package punctuation fires what is due in the scheduler's table at a cost
// proportional to what is due, not to the table size.
//
// Goka has no timers, so punctuation is built from three parts:
//
//   - a storage wrapper that keeps a due Index for every table partition this
//     instance owns: it builds the index from the local store once Goka has
//     restored the partition (MarkRecovered), then sees every Set and Delete;
//   - a Punctuator goroutine that sends a tick to a partition of the ticks
//     topic when that partition's earliest due time arrives (and a slow
//     heartbeat otherwise), at most one tick in flight per partition;
//   - the scheduler's tick callback, which takes the due follow-ups from the
//     partition's Index, publishes their calls and writes the partition's
//     fired mark (one table value under the tick key) instead of each
//     user's value. The index treats every follow-up at or before the mark
//     as fired; a user's next command records it in the user's value.
package punctuation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/internal/clock"
)

// Config configures a Punctuator.
type Config struct {
	// Table is the topic of the group table to index.
	Table string
	// Parse reads the follow-ups (and, on a tick key, the mark) of a table
	// value.
	Parse func(value []byte) (*Value, error)
	// MarkKey is the table key that holds a partition's mark.
	MarkKey func(partition int32) string
	// Send produces a tick to the given partition of the ticks topic,
	// carrying the partition's mark as it is now. It should not block on the
	// broker's acknowledgement.
	Send  func(partition int32, through Pos) error
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
	case c.Parse == nil:
		return errors.New("punctuation: no Parse function")
	case c.MarkKey == nil:
		return errors.New("punctuation: no MarkKey function")
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
	table       storage.Storage
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

// Table returns the local store of an owned partition (reads only: the
// partition's callbacks write through their context), or nil.
func (p *Punctuator) Table(part int32) storage.Storage {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.parts[part]; s != nil {
		return s.table
	}
	return nil
}

// FiredBetween scans an owned partition's table for the fired follow-ups in
// (from, to], in firing order: the slow path of a replay that reaches back
// before the Checkpoint. Call it on the partition's goroutine.
func (p *Punctuator) FiredBetween(part int32, from, to Pos) ([]Pos, error) {
	st := p.Table(part)
	if st == nil {
		return nil, fmt.Errorf("partition %d not owned", part)
	}
	var out []Pos
	add := func(key string, ts []Task) {
		for _, t := range ts {
			if q := (Pos{t.Due, key, t.ID}); from.Less(q) && !to.Less(q) {
				out = append(out, q)
			}
		}
	}
	err := scanStore(st, func(key string, raw []byte) {
		if v, err := p.cfg.Parse(raw); err == nil { // an unreadable value was logged when it was written
			add(key, v.Pending)
			add(key, v.Fired)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("scan partition %d: %w", part, err)
	}
	slices.SortFunc(out, Compare)
	return out, nil
}

// scanStore calls fn with every key and value of a store, in key order.
func scanStore(st storage.Storage, fn func(key string, raw []byte)) error {
	it, err := st.Iterator()
	if err != nil {
		return err
	}
	defer it.Release()
	for it.Next() {
		raw, err := it.Value()
		if err != nil {
			return err
		}
		fn(string(it.Key()), raw)
	}
	return it.Err()
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
	type tick struct {
		part    int32
		through Pos
	}
	var send []tick
	for id, s := range p.parts {
		at := p.tickAt(s)
		if !at.After(now) {
			send = append(send, tick{id, s.index.Mark().Through})
			s.lastSent, s.outstanding = now, true
			at = now.Add(p.cfg.TickTimeout)
		}
		if at.Before(next) {
			next = at
		}
	}
	p.mu.Unlock()
	for _, t := range send {
		if err := p.cfg.Send(t.part, t.through); err != nil {
			p.cfg.Logger.Warn("send tick", "partition", t.part, "err", err)
			p.mu.Lock()
			if s := p.parts[t.part]; s != nil {
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

func (p *Punctuator) register(part int32, x *Index, table storage.Storage) {
	p.mu.Lock()
	p.parts[part] = &partition{index: x, table: table}
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
//
// While Goka restores the partition (from Open to MarkRecovered) writes are
// not indexed one by one: MarkRecovered builds the index with one scan of
// the restored store, which is cheaper than reading each key's old value
// during a restore of millions of records.
//
// After that, the index needs a key's old value to drop its old follow-ups.
// A callback reads the value (Get) right before it writes it (Set), so the
// wrapper keeps the last value read; other writes read it from the store.
type indexed struct {
	storage.Storage
	p     *Punctuator
	part  int32
	index *Index // nil while restoring

	mu       sync.Mutex
	lastKey  string
	lastVal  []byte
	lastHeld bool
}

// MarkRecovered builds the index from the restored store: the mark first,
// so that the scan knows which follow-ups have fired, then every value.
func (s *indexed) MarkRecovered() error {
	if err := s.Storage.MarkRecovered(); err != nil {
		return err
	}
	start := time.Now()
	x := NewIndex(s.p.poke)
	key := s.p.cfg.MarkKey(s.part)
	if raw, err := s.Storage.Get(key); err != nil {
		return fmt.Errorf("index partition %d: %w", s.part, err)
	} else if raw != nil {
		x.Update(key, nil, s.parse(key, raw))
	}
	n := 0
	err := scanStore(s.Storage, func(key string, raw []byte) {
		x.Update(key, nil, s.parse(key, raw))
		n++
	})
	if err != nil {
		return fmt.Errorf("index partition %d: %w", s.part, err)
	}
	s.index = x
	s.p.cfg.Logger.Info("due index built", "table", s.p.cfg.Table, "partition", s.part, "keys", n, "pending", x.Len(), "took", time.Since(start).Round(time.Millisecond))
	s.p.register(s.part, x, s.Storage)
	return nil
}

func (s *indexed) Close() error {
	if s.index != nil {
		s.p.unregister(s.part, s.index)
	}
	return s.Storage.Close()
}

func (s *indexed) Get(key string) ([]byte, error) {
	v, err := s.Storage.Get(key)
	if err == nil {
		s.mu.Lock()
		s.lastKey, s.lastVal, s.lastHeld = key, v, true
		s.mu.Unlock()
	}
	return v, err
}

// forget drops the value kept from a read of key, which is about to change.
func (s *indexed) forget(key string) {
	s.mu.Lock()
	if s.lastKey == key {
		s.lastKey, s.lastVal, s.lastHeld = "", nil, false
	}
	s.mu.Unlock()
}

// previous is key's value before the write about to happen.
func (s *indexed) previous(key string) *Value {
	s.mu.Lock()
	v, held := s.lastVal, s.lastHeld && s.lastKey == key
	s.lastKey, s.lastVal, s.lastHeld = "", nil, false
	s.mu.Unlock()
	if !held {
		var err error
		if v, err = s.Storage.Get(key); err != nil {
			s.p.cfg.Logger.Error("read table value before writing it", "table", s.p.cfg.Table, "partition", s.part, "key", key, "err", err)
			return nil
		}
	}
	if v == nil {
		return nil
	}
	return s.parse(key, v)
}

func (s *indexed) Set(key string, value []byte) error {
	if s.index == nil { // restoring
		return s.Storage.Set(key, value)
	}
	v := s.parse(key, value)
	var old *Value
	if v == nil || v.Mark == nil {
		old = s.previous(key)
	} else {
		s.forget(key) // a mark's key holds no follow-ups: its old value is not needed
	}
	if err := s.Storage.Set(key, value); err != nil {
		return err
	}
	s.index.Update(key, old, v)
	return nil
}

func (s *indexed) Delete(key string) error {
	if s.index == nil { // restoring
		return s.Storage.Delete(key)
	}
	old := s.previous(key)
	if err := s.Storage.Delete(key); err != nil {
		return err
	}
	s.index.Update(key, old, nil)
	return nil
}

func (s *indexed) parse(key string, value []byte) *Value {
	v, err := s.p.cfg.Parse(value)
	if err != nil {
		s.p.cfg.Logger.Error("unreadable table value, not indexed", "table", s.p.cfg.Table, "partition", s.part, "key", key, "err", err)
		return nil
	}
	return v
}
