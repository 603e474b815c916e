package localstore

import (
	"fmt"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// Marks: with Stores.Mark, a store keeps the keys whose value a Marker
// accepts in an index of their own (LevelDB keys MarkPrefix + key), written
// in the same batches as the values, so that Marked lists them at a cost
// proportional to their number, after a kill -9 too.

// MarkPrefix starts the LevelDB keys of the marks: MarkPrefix + the marked
// key. The marks sort right before OffsetKey; iterators skip them.
const MarkPrefix = "__ivrsched-mark/"

// markEnd is the first key after the marks.
const markEnd = "__ivrsched-mark0"

// Marker says whether a table value is marked. It is called on every write
// (restored or acknowledged), from the store's writer and Goka's recovery,
// so it must be cheap and safe for concurrent use.
type Marker func(value []byte) bool

// Mark makes the stores keep an index of the keys whose value m accepts
// (see Marked). Call it before the stores are built.
func (s *Stores) Mark(m Marker) { s.marker = m }

// isInternal says whether a LevelDB key is the store's own (the offset, a
// mark), not a table key.
func isInternal(k []byte) bool {
	return string(k) == OffsetKey || (len(k) >= len(MarkPrefix) && string(k[:len(MarkPrefix)]) == MarkPrefix) || isIndex(k)
}

// put adds a write of key (a delete if value is nil) to b, and its mark's
// and secondary index entries' (old is the value it replaces).
func (s *store) put(b *leveldb.Batch, key string, old, value []byte) {
	s.putIndex(b, key, old, value)
	if value == nil {
		b.Delete([]byte(key))
	} else {
		b.Put([]byte(key), value)
	}
	if s.marker == nil {
		return
	}
	if value != nil && s.marker(value) {
		b.Put([]byte(MarkPrefix+key), nil)
	} else {
		b.Delete([]byte(MarkPrefix + key))
	}
}

// Marked returns the keys whose value is marked (Stores.Mark), reading
// only the marks: its cost is proportional to their number, not to the
// table's.
func (s *store) Marked() ([]string, error) {
	if s.db == nil {
		return nil, errNotOpen
	}
	if s.marker == nil {
		return nil, fmt.Errorf("localstore: %s keeps no marks", s.path)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.recovered.Load() {
		if err := s.writeRestored(); err != nil {
			return nil, err
		}
	}
	var out []string
	// The overlay holds the newest value of its keys; LevelDB the rest.
	for k, e := range s.overlay {
		if e.value != nil && s.marker(e.value) {
			out = append(out, k)
		}
	}
	it := s.db.NewIterator(&util.Range{Start: []byte(MarkPrefix), Limit: []byte(markEnd)}, nil)
	defer it.Release()
	for it.Next() {
		k := string(it.Key()[len(MarkPrefix):])
		if _, over := s.overlay[k]; !over {
			out = append(out, k)
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("localstore: read marks in %s: %w", s.path, err)
	}
	return out, nil
}
