package suppress

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/lovoo/goka/storage"
)

// StorageBuilder builds the store of each partition of a Goka view of the
// list (goka.WithViewStorageBuilder), in memory. Goka's own memory storage
// sorts all its keys at every Set of a new one, so a restore of n entries
// takes time quadratic in n (1,000,000 entries on 8 partitions did not load
// in minutes), and it keeps each value as a slice of the fetch response it
// came in, so the whole response stays in memory with it. This store keeps
// a record key that is a hash (64 lowercase hex digits, Key.Hash) as its 32
// bytes and a copy of each value, sorts only when iterated, and takes a
// Set in constant time.
func StorageBuilder() storage.Builder {
	return func(string, int32) (storage.Storage, error) { return NewStorage(), nil }
}

// NewStorage returns an empty store (StorageBuilder's).
func NewStorage() storage.Storage {
	return &memStorage{hashed: make(map[[32]byte]string), other: make(map[string]string)}
}

// memStorage is safe for concurrent use: the view's partition goroutine
// writes while the roles read.
type memStorage struct {
	mu     sync.RWMutex
	hashed map[[32]byte]string // keys of 64 lowercase hex digits
	other  map[string]string   // any other key a producer wrote
	offset *int64
}

// rawKey returns the 32 bytes of a key of 64 lowercase hex digits; ok is
// false for any other key.
func rawKey(key string) (k [32]byte, ok bool) {
	if len(key) != 2*len(k) {
		return k, false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return k, false
		}
	}
	_, err := hex.Decode(k[:], []byte(key))
	return k, err == nil
}

// Len returns the number of entries in s, a store NewStorage made (0 for
// any other).
func Len(s storage.Storage) int {
	m, ok := s.(*memStorage)
	if !ok {
		return 0
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.hashed) + len(m.other)
}

func (m *memStorage) Open() error  { return nil }
func (m *memStorage) Close() error { return nil }

func (m *memStorage) Has(key string) (bool, error) {
	_, ok := m.get(key)
	return ok, nil
}

// Get returns a copy of the value stored under key, nil if none (an empty
// value stored is empty, not nil).
func (m *memStorage) Get(key string) ([]byte, error) {
	v, ok := m.get(key)
	if !ok {
		return nil, nil
	}
	return []byte(v), nil
}

func (m *memStorage) get(key string) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if k, ok := rawKey(key); ok {
		v, ok := m.hashed[k]
		return v, ok
	}
	v, ok := m.other[key]
	return v, ok
}

// Set stores a copy of value: the caller's slice is not kept.
func (m *memStorage) Set(key string, value []byte) error {
	if value == nil {
		return fmt.Errorf("cannot write nil value")
	}
	v := string(value)
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := rawKey(key); ok {
		m.hashed[k] = v
	} else {
		m.other[key] = v
	}
	return nil
}

func (m *memStorage) Delete(key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if k, ok := rawKey(key); ok {
		delete(m.hashed, k)
	} else {
		delete(m.other, key)
	}
	return nil
}

func (m *memStorage) GetOffset(def int64) (int64, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.offset == nil {
		return def, nil
	}
	return *m.offset, nil
}

func (m *memStorage) SetOffset(offset int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.offset = &offset
	return nil
}

func (m *memStorage) MarkRecovered() error { return nil }

// Iterator returns an iterator over a snapshot of the store, in key order.
func (m *memStorage) Iterator() (storage.Iterator, error) {
	return m.IteratorWithRange(nil, nil)
}

// IteratorWithRange returns an iterator over a snapshot of the keys from
// start up to limit (exclusive; nil: no limit), in key order.
func (m *memStorage) IteratorWithRange(start, limit []byte) (storage.Iterator, error) {
	in := func(k string) bool {
		return bytes.Compare([]byte(k), start) >= 0 && (limit == nil || bytes.Compare([]byte(k), limit) < 0)
	}
	it := &memIterator{pos: -1}
	m.mu.RLock()
	for k, v := range m.hashed {
		if s := hex.EncodeToString(k[:]); in(s) {
			it.entries = append(it.entries, entry{s, v})
		}
	}
	for k, v := range m.other {
		if in(k) {
			it.entries = append(it.entries, entry{k, v})
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(it.entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	return it, nil
}

type entry struct{ key, value string }

type memIterator struct {
	entries []entry
	pos     int
}

func (it *memIterator) Next() bool {
	if it.pos < len(it.entries) {
		it.pos++
	}
	return it.pos < len(it.entries)
}

func (it *memIterator) valid() bool { return it.pos >= 0 && it.pos < len(it.entries) }

func (it *memIterator) Err() error { return nil }

func (it *memIterator) Key() []byte {
	if !it.valid() {
		return nil
	}
	return []byte(it.entries[it.pos].key)
}

func (it *memIterator) Value() ([]byte, error) {
	if !it.valid() {
		return nil, nil
	}
	return []byte(it.entries[it.pos].value), nil
}

func (it *memIterator) Release() { it.pos = len(it.entries) }

// Seek moves to the first key at or after key and reports whether there is one.
func (it *memIterator) Seek(key []byte) bool {
	it.pos, _ = slices.BinarySearchFunc(it.entries, string(key), func(e entry, k string) int {
		return strings.Compare(e.key, k)
	})
	return it.valid()
}
