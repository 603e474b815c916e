package dueindex

import (
	"fmt"
	"sync"
	"time"

	"github.com/lovoo/goka/storage"
)

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
// After that, the index needs a key's old value to drop its old follow-ups:
// a write reads it from the store first. (The store has it at hand: the
// callback read it moments before. The wrapper keeps no value of its own:
// Goka's Processor.Get, for the web page and the admin API, reads through
// the same Get from other goroutines, and a read that straddled a
// callback's write would leave a stale value to take for the old one.)
//
// Goka calls MarkRecovered on the partition's goroutine, except when a
// revoke cut the restore off: then in a goroutine nothing waits for, which
// may run while Close does or after it. A partition closed before its
// MarkRecovered registered it is therefore not registered: closed,
// checked with the registering under life, says so.
type indexed struct {
	storage.Storage
	p     *Punctuator
	part  int32
	index *Index // nil while restoring; set under life

	life   sync.Mutex
	closed bool
}

// While the index of a large partition is built, its progress is logged
// every buildProgressEvery (the clock is read every buildCheckEvery keys;
// a variable for tests).
var buildProgressEvery = 2 * time.Second

const buildCheckEvery = 4096

// MarkRecovered builds the index from the restored store: the mark first,
// so that the scan knows which follow-ups have fired, then every value. An
// index kept from the partition's last close is taken instead when the
// store is as it was then (see kept.go). A build logs its progress while
// it takes longer than buildProgressEvery.
func (s *indexed) MarkRecovered() error {
	if s.isClosed() {
		return nil
	}
	if err := s.Storage.MarkRecovered(); err != nil {
		return err
	}
	start := time.Now()
	if x := s.p.reclaim(s.part, s.Storage); x != nil {
		if !s.take(x) {
			return nil
		}
		s.p.cfg.Logger.Info("due index built", "table", s.p.cfg.Table, "partition", s.part, "keys", x.Keys(), "pending", x.Len(),
			"took", time.Since(start).Round(time.Millisecond), "kept", true)
		return nil
	}
	x := NewIndex(s.p.poke)
	x.SetRetention(s.p.cfg.Retain)
	key := s.p.cfg.MarkKey(s.part)
	if raw, err := s.Storage.Get(key); err != nil {
		return fmt.Errorf("index partition %d: %w", s.part, err)
	} else if raw != nil {
		x.Update(key, nil, s.parse(key, raw))
	}
	if st, ok := s.Storage.(Store); ok && st.IndexVersion() == EntriesVersion {
		// The store keeps the due order: read the window, no scan.
		if err := x.setStore(st, s.p.cfg.Clock.Now()); err != nil {
			if s.isClosed() {
				return nil
			}
			return fmt.Errorf("index partition %d: %w", s.part, err)
		}
		if !s.take(x) {
			return nil
		}
		go x.CountBeyond()
		s.p.cfg.Logger.Info("due index opened", "table", s.p.cfg.Table, "partition", s.part, "window", x.Len(), "timers", len(x.Timers()),
			"took", time.Since(start).Round(time.Millisecond))
		return nil
	}
	n := 0
	progress := start
	err := scanStore(s.Storage, func(key string, raw []byte) {
		x.Update(key, nil, s.parse(key, raw))
		n++
		if n%buildCheckEvery == 0 && time.Since(progress) >= buildProgressEvery {
			progress = time.Now()
			s.p.cfg.Logger.Info("building due index", "table", s.p.cfg.Table, "partition", s.part, "keys", n, "pending", x.Len(),
				"keys_per_s", int64(float64(n)/progress.Sub(start).Seconds()), "since", progress.Sub(start).Round(time.Second))
		}
	})
	if err != nil {
		if s.isClosed() {
			return nil // the store was closed under the scan
		}
		return fmt.Errorf("index partition %d: %w", s.part, err)
	}
	if !s.take(x) {
		return nil
	}
	s.p.cfg.Logger.Info("due index built", "table", s.p.cfg.Table, "partition", s.part, "keys", n, "pending", x.Len(), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// take makes x the partition's index and registers it, unless the
// partition was closed.
func (s *indexed) take(x *Index) bool {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return false
	}
	s.index = x
	s.p.register(s.part, x, s.Storage)
	return true
}

func (s *indexed) isClosed() bool {
	s.life.Lock()
	defer s.life.Unlock()
	return s.closed
}

func (s *indexed) Close() error {
	s.life.Lock()
	s.closed = true
	x := s.index
	s.life.Unlock()
	if x != nil {
		s.p.unregister(s.part, x)
	}
	err := s.Storage.Close()
	if err == nil && x != nil {
		s.p.keep(s.part, x, s.Storage)
	}
	return err
}

// previous is key's value before the write about to happen. An error
// fails the write: the index cannot drop follow-ups it cannot read.
func (s *indexed) previous(key string) (*Value, error) {
	v, err := s.Storage.Get(key)
	if err != nil {
		return nil, fmt.Errorf("index partition %d: read %q before writing it: %w", s.part, key, err)
	}
	if v == nil {
		return nil, nil
	}
	return s.parse(key, v), nil
}

func (s *indexed) Set(key string, value []byte) error {
	if s.index == nil { // restoring
		return s.Storage.Set(key, value)
	}
	v := s.parse(key, value)
	var old *Value
	if v == nil || v.Mark == nil { // a mark's key holds no follow-ups: its old value is not needed
		var err error
		if old, err = s.previous(key); err != nil {
			return err
		}
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
	old, err := s.previous(key)
	if err != nil {
		return err
	}
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
