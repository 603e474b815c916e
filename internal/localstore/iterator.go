package localstore

import (
	"slices"
	"strings"

	"github.com/lovoo/goka/storage"
	"github.com/syndtr/goleveldb/leveldb/iterator"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// Iterators: a snapshot of LevelDB with the overlay's snapshot laid over it.

func (s *store) Iterator() (storage.Iterator, error) {
	return s.IteratorWithRange(nil, nil)
}

// IteratorWithRange iterates over a snapshot of the table: LevelDB merged
// with the overlay.
func (s *store) IteratorWithRange(start, limit []byte) (storage.Iterator, error) {
	if s.db == nil {
		return nil, errNotOpen
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.recovered.Load() {
		if err := s.writeRestored(); err != nil {
			return nil, err
		}
	}
	var r *util.Range
	if start != nil || limit != nil {
		r = &util.Range{Start: start, Limit: limit}
	}
	// Both under mu: the writer drops a key from the overlay only after
	// LevelDB has it, so each key is in one of the two snapshots.
	it := &mergedIterator{db: s.db.NewIterator(r, nil), dbStale: true}
	for k, e := range s.overlay {
		if (start == nil || k >= string(start)) && (limit == nil || k < string(limit)) {
			it.over = append(it.over, kv{k, e.value})
		}
	}
	it.sortOverlay()
	return it, nil
}

type kv struct {
	k string
	v []byte // nil: deleted
}

// mergedIterator iterates over a LevelDB snapshot with the overlay's
// snapshot laid over it, in key order: an overlay value replaces LevelDB's,
// an overlay delete hides it. It skips the offset key and the marks.
type mergedIterator struct {
	db   iterator.Iterator
	over []kv // sorted by key
	oi   int  // next overlay entry

	dbValid bool // db is at an element not returned yet
	dbStale bool // db must move on first: it is at the element returned last, or not started

	key   []byte
	value []byte
}

func (m *mergedIterator) sortOverlay() {
	slices.SortFunc(m.over, func(a, b kv) int { return strings.Compare(a.k, b.k) })
}

func (m *mergedIterator) advanceDB() {
	m.dbValid = m.db.Next()
	m.skipStoreKeys()
}

// skipStoreKeys steps past the secondary index, the marks and the offset
// key, which are no table state: the index and the marks in one seek each
// (each is contiguous; they sort in this order, right before the offset key).
func (m *mergedIterator) skipStoreKeys() {
	if m.dbValid && strings.HasPrefix(string(m.db.Key()), IndexPrefix) {
		m.dbValid = m.db.Seek([]byte(indexEnd))
	}
	if m.dbValid && strings.HasPrefix(string(m.db.Key()), MarkPrefix) {
		m.dbValid = m.db.Seek([]byte(markEnd))
	}
	if m.dbValid && string(m.db.Key()) == OffsetKey {
		m.dbValid = m.db.Next()
	}
}

// Next moves to the next key of the merged view.
func (m *mergedIterator) Next() bool {
	if m.dbStale {
		m.dbStale = false
		m.advanceDB()
	}
	for {
		haveOver := m.oi < len(m.over)
		if !m.dbValid && !haveOver {
			m.key, m.value = nil, nil
			return false
		}
		fromOver := haveOver
		if m.dbValid && haveOver {
			c := strings.Compare(string(m.db.Key()), m.over[m.oi].k)
			if c == 0 {
				m.advanceDB() // replaced or hidden by the overlay
			}
			fromOver = c >= 0
		}
		if !fromOver {
			m.key, m.value = m.db.Key(), m.db.Value()
			m.dbStale = true
			return true
		}
		e := m.over[m.oi]
		m.oi++
		if e.v == nil {
			continue
		}
		m.key, m.value = []byte(e.k), e.v
		return true
	}
}

func (m *mergedIterator) Err() error { return m.db.Error() }

func (m *mergedIterator) Key() []byte { return m.key }

func (m *mergedIterator) Value() ([]byte, error) { return m.value, nil }

func (m *mergedIterator) Release() { m.db.Release() }

// Seek moves the iterator before the first key at or after key: the next
// Next returns it. It reports whether the view may hold such a key (a
// deleted overlay key can make it true and Next false).
func (m *mergedIterator) Seek(key []byte) bool {
	m.dbStale = false
	m.dbValid = m.db.Seek(key)
	m.skipStoreKeys()
	m.oi, _ = slices.BinarySearchFunc(m.over, string(key), func(e kv, k string) int { return strings.Compare(e.k, k) })
	return m.dbValid || m.oi < len(m.over)
}
