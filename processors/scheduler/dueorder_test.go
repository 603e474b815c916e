package scheduler

import (
	"sort"
	"sync"

	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
)

// dueOrderStore is a table store that keeps the due order beside its
// values (dueindex.Entries), as the local stores do in production
// (localstore.Stores.Index): the harness's scheduler runs with a due index
// that holds a window of it, as in production.
type dueOrderStore struct {
	storage.Storage
	mu      sync.Mutex
	entries map[string]dueEntry // by sub
}

type dueEntry struct{ key, meta string }

// withDueOrder wraps the table's stores of build in dueOrderStores.
func withDueOrder(build storage.Builder, table string) storage.Builder {
	return func(topic string, part int32) (storage.Storage, error) {
		st, err := build(topic, part)
		if err != nil || topic != table {
			return st, err
		}
		return &dueOrderStore{Storage: st, entries: make(map[string]dueEntry)}, nil
	}
}

var dueEntries = dueindex.Entries(ParseValue)

func (d *dueOrderStore) index(key string, value []byte, add bool) {
	if value == nil {
		return
	}
	dueEntries(key, value, func(sub, meta []byte) {
		if add {
			d.entries[string(sub)] = dueEntry{key, string(meta)}
		} else {
			delete(d.entries, string(sub))
		}
	})
}

func (d *dueOrderStore) Set(key string, value []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	old, err := d.Storage.Get(key)
	if err != nil {
		return err
	}
	d.index(key, old, false)
	d.index(key, value, true)
	return d.Storage.Set(key, value)
}

func (d *dueOrderStore) Delete(key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	old, err := d.Storage.Get(key)
	if err != nil {
		return err
	}
	d.index(key, old, false)
	return d.Storage.Delete(key)
}

func (d *dueOrderStore) IndexVersion() string { return dueindex.EntriesVersion }

func (d *dueOrderStore) IndexRange(from, to []byte, fn func(sub []byte, key string, meta []byte) bool) error {
	d.mu.Lock()
	var subs []string
	for s := range d.entries {
		if s >= string(from) && (to == nil || s < string(to)) {
			subs = append(subs, s)
		}
	}
	sort.Strings(subs)
	es := make([]dueEntry, len(subs))
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
