// Package dueindex fires what is due in the scheduler's table at a cost
// proportional to what is due, not to the table size.
//
// Goka has no timers, so firing what is due is built from three parts:
//
//   - a storage wrapper that keeps a due Index for every table partition this
//     instance owns: it builds the index from the local store once Goka has
//     restored the partition (MarkRecovered), then sees every Set and Delete;
//   - a Punctuator goroutine that sends a tick to a partition of the ticks
//     topic when that partition's earliest due time arrives, at most one
//     tick in flight per partition; a partition with nothing due gets no
//     tick (apart from its first after an open, and one per policy change);
//   - the scheduler's tick callback, which takes the due follow-ups from the
//     partition's Index, publishes their calls and writes the partition's
//     fired mark (one table value under the tick key) instead of each
//     user's value. The index treats every follow-up at or before the mark
//     as fired; a user's next command records it in the user's value.
package dueindex

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
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
	// Recheck is the longest the punctuator waits before it reads the
	// clock and looks at every partition again (default 1 s). It waits on
	// a monotonic timer, so a due time reached by a wall-clock step is
	// noticed at the next recheck, and so is a new policy version
	// (Version). A recheck sends no tick by itself: a partition with
	// nothing due and nothing to sweep gets none.
	Recheck time.Duration
	// Version, if set, returns the version of the calling policy in force.
	// A partition whose mark records another as swept (Mark.Swept) is
	// ticked, for its tick to sweep the deferred follow-ups and record the
	// version; while the mark does not record it, at most once a Recheck.
	// Called from the punctuator's goroutine once a round; it must be cheap.
	Version func() string
	// TickTimeout is how long a tick may go unanswered before another is sent.
	TickTimeout time.Duration
	// Retain, if positive, gives every user with nothing pending a
	// retention timer at its LastActive plus Retain (Index.SetRetention).
	Retain time.Duration
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.MinGap <= 0 {
		c.MinGap = 2 * time.Millisecond
	}
	if c.Recheck <= 0 {
		c.Recheck = time.Second
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
		return errors.New("dueindex: no table topic")
	case c.Parse == nil:
		return errors.New("dueindex: no Parse function")
	case c.MarkKey == nil:
		return errors.New("dueindex: no MarkKey function")
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
	kept  map[int32]*keptIndex // indexes of closed partitions, for their next open (kept.go)
	// reused counts the partition opens that took a kept index back.
	reused atomic.Int64
}

type partition struct {
	index       *Index
	table       storage.Storage
	lastSent    time.Time
	outstanding bool
	// answered: a tick was processed since the partition was opened. Until
	// then the partition is ticked whatever is due: its first tick settles
	// the replay window (Index.Replayed).
	answered bool
}

// New returns a Punctuator. Run must be called for ticks to be sent.
func New(cfg Config) (*Punctuator, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Punctuator{cfg: cfg, wake: make(chan struct{}, 1), parts: make(map[int32]*partition), kept: make(map[int32]*keptIndex)}, nil
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
//
// An index that keeps a window of its store's due order reads the store's
// entries in that range instead (disk.go).
func (p *Punctuator) FiredBetween(part int32, from, to Pos) ([]Pos, error) {
	if x := p.Index(part); x != nil && x.Windowed() {
		out, err := x.firedBetween(from, to)
		if err != nil {
			return nil, fmt.Errorf("read the fired follow-ups of partition %d: %w", part, err)
		}
		return out, nil
	}
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
		s.outstanding, s.answered = false, true
	}
	p.mu.Unlock()
	p.poke()
}

// NextTick reports when the punctuator sends the partition's next tick as
// things stand (a time already past: at its next round), or false when it
// sends none until something changes (a follow-up scheduled, a policy
// version, the partition not owned).
func (p *Punctuator) NextTick(part int32) (time.Time, bool) {
	version := p.version()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.parts[part]
	if s == nil {
		return time.Time{}, false
	}
	return p.tickAt(s, version)
}

// version is the policy version in force, "" without Config.Version.
func (p *Punctuator) version() string {
	if p.cfg.Version == nil {
		return ""
	}
	return p.cfg.Version()
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
		return errors.New("dueindex: no Send function")
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

// round sends the ticks that are due and returns how long to wait for the
// next round: until the earliest next tick, at most Recheck.
func (p *Punctuator) round() time.Duration {
	version := p.version()
	now := p.cfg.Clock.Now()
	next := now.Add(p.cfg.Recheck)
	p.mu.Lock()
	type tick struct {
		part    int32
		through Pos
	}
	var send []tick
	for id, s := range p.parts {
		at, ok := p.tickAt(s, version)
		if !ok {
			continue // nothing due: the next round looks again
		}
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

// tickAt is when the partition's next tick should go out; false: not
// until something changes. version is the policy version in force.
func (p *Punctuator) tickAt(s *partition, version string) (time.Time, bool) {
	if s.outstanding { // unanswered: sent again after the timeout
		return s.lastSent.Add(p.cfg.TickTimeout), true
	}
	at, ok := s.index.Next()
	sooner := func(t time.Time) {
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	if !s.answered { // the first tick after the open (after a failed send, again a Recheck later)
		sooner(s.lastSent.Add(p.cfg.Recheck))
	}
	if p.cfg.Version != nil && version != s.index.Mark().Swept {
		// A policy version the mark does not record: a tick sweeps the
		// deferred follow-ups (or starts to) and records it.
		sooner(s.lastSent.Add(p.cfg.Recheck))
	}
	if s.index.Sweeping() { // a sweep under way: as often as the gap allows
		sooner(s.lastSent)
	}
	if !ok {
		return time.Time{}, false
	}
	if gap := s.lastSent.Add(p.cfg.MinGap); at.Before(gap) {
		at = gap
	}
	return at, true
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
