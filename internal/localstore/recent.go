package localstore

import "container/list"

// recentBytes bounds the values a store keeps of the keys read or written
// last (recent), keys and a per-entry overhead counted: 1 MiB per table
// partition.
//
// A callback mostly reads what a callback of the same partition read or
// wrote moments before: the dialer reads a user's value when a call comes
// (is it a duplicate?) and again when the placement's answer comes back
// through its loop topic, milliseconds to seconds later, then with each of
// the provider's status callbacks; a retry's outcome comes back to the
// scheduler for the user whose follow-up just fired. Each such read cost a
// LevelDB Get: two memtable searches, then the tables, a data block read
// and decompressed when the block cache did not have it (at 10,000 calls a
// second the dialer's reads were an eighth of the process's CPU).
var recentBytes = 1 << 20

// recentOverhead is what one entry costs besides its key and value: the
// list element, the map entry, the entry itself.
const recentOverhead = 112

// recent holds the last values read from or written to LevelDB by key,
// absent keys too (a nil value), least recently used dropped first, up to
// a byte budget. It is not safe for concurrent use: the store's mu guards
// it.
type recent struct {
	budget, size int
	order        list.List // of *recentEntry, most recent first
	byKey        map[string]*list.Element
}

type recentEntry struct {
	key   string
	value []byte // nil: the key is absent
}

func newRecent(budget int) *recent {
	return &recent{budget: budget, byKey: make(map[string]*list.Element)}
}

func entrySize(key string, value []byte) int { return len(key) + len(value) + recentOverhead }

// get returns the value kept for key (nil: absent) and whether one is kept.
func (r *recent) get(key string) ([]byte, bool) {
	el := r.byKey[key]
	if el == nil {
		return nil, false
	}
	r.order.MoveToFront(el)
	return el.Value.(*recentEntry).value, true
}

// put keeps value (nil: absent) as key's, and drops the least recently
// used entries past the budget. A value larger than the budget is not kept.
func (r *recent) put(key string, value []byte) {
	r.remove(key)
	size := entrySize(key, value)
	if size > r.budget {
		return
	}
	r.byKey[key] = r.order.PushFront(&recentEntry{key: key, value: value})
	r.size += size
	for r.size > r.budget {
		r.drop(r.order.Back())
	}
}

// remove forgets key.
func (r *recent) remove(key string) {
	if el := r.byKey[key]; el != nil {
		r.drop(el)
	}
}

func (r *recent) drop(el *list.Element) {
	e := r.order.Remove(el).(*recentEntry)
	delete(r.byKey, e.key)
	r.size -= entrySize(e.key, e.value)
}
