// Package dueindextest has a memory table store that keeps the due order
// beside its values, as internal/localstore's stores do (Stores.Index), for
// the tests of the due index and of the scheduler.
package dueindextest

import (
	"sort"
	"sync"

	"github.com/lovoo/goka/storage"
)

// Store wraps a Goka storage: each Set and Delete also updates the entries
// that Entries derives from the values, and IndexRange reads them in
// order (dueindex.Store).
type Store struct {
	storage.Storage
	entriesOf func(key string, value []byte, put func(sub, meta []byte))
	version   string
	mu        sync.Mutex
	entries   map[string]entry // by sub
}

type entry struct{ key, meta string }

// New wraps st, keeping the entries of entries (dueindex.Entries) under the
// given version (dueindex.EntriesVersion).
func New(st storage.Storage, version string, entries func(key string, value []byte, put func(sub, meta []byte))) *Store {
	return &Store{Storage: st, entriesOf: entries, version: version, entries: make(map[string]entry)}
}

func (d *Store) index(key string, value []byte, add bool) {
	if value == nil {
		return
	}
	d.entriesOf(key, value, func(sub, meta []byte) {
		if add {
			d.entries[string(sub)] = entry{key, string(meta)}
		} else {
			delete(d.entries, string(sub))
		}
	})
}

// Set stores value and its entries in place of the old value's.
func (d *Store) Set(key string, value []byte) error {
	return d.change(key, value, func() error { return d.Storage.Set(key, value) })
}

// Delete removes the value and its entries.
func (d *Store) Delete(key string) error {
	return d.change(key, nil, func() error { return d.Storage.Delete(key) })
}

// change replaces the entries of key's old value by those of value (nil:
// none), then writes.
func (d *Store) change(key string, value []byte, write func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	old, err := d.Storage.Get(key)
	if err != nil {
		return err
	}
	d.index(key, old, false)
	d.index(key, value, true)
	return write()
}

// IndexVersion is the version given to New.
func (d *Store) IndexVersion() string { return d.version }

// IndexRange calls fn in sub order with the entries whose sub is in
// [from, to) (to nil: no end), until fn returns false.
func (d *Store) IndexRange(from, to []byte, fn func(sub []byte, key string, meta []byte) bool) error {
	d.mu.Lock()
	var subs []string
	for s := range d.entries {
		if s >= string(from) && (to == nil || s < string(to)) {
			subs = append(subs, s)
		}
	}
	sort.Strings(subs)
	es := make([]entry, len(subs))
	for i, s := range subs {
		es[i] = d.entries[s]
	}
	d.mu.Unlock()
	for i, s := range subs {
		if !fn([]byte(s), es[i].key, []byte(es[i].meta)) {
			break
		}
	}
	return nil
}
