package localstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// The secondary index: with Stores.Index, a store keeps, beside each table
// value, the secondary entries an Indexer derives from it (LevelDB keys
// IndexPrefix + sub), written in the same LevelDB batch as the value, by the
// writer and by the restore alike. The store is then a prefix of the
// changelog with its index, whatever kills the process, and an index is
// read in sub order (IndexRange) at a cost proportional to what is read,
// without a scan of the table at open.
//
// A write drops the entries of the key's old value: the writer takes it from
// the batch, or from the values the store keeps of the keys read or written
// last (recent.go, which match LevelDB), or else reads it from LevelDB
// (which holds exactly the state before the batch). A store opened with
// another index version than it was written with (none: written before the
// index existed) rebuilds the index once, with one scan, before Goka
// restores its tail; the version is written last, so a rebuild cut off is
// done again.

// IndexPrefix starts the LevelDB keys of the secondary index: IndexPrefix +
// sub, whose value is uvarint(len(key)) + key + meta. IndexPrefix alone
// holds the index version. The entries sort right before the marks;
// iterators skip them.
const IndexPrefix = "__ivrsched-index/"

// indexEnd is the first key after the index.
const indexEnd = "__ivrsched-index0"

// Indexer lists the secondary entries of the table value of key: put is
// called once per entry with its sub (not empty) and meta, which put copies.
// It is called on every write (restored or acknowledged) from the store's
// writer and Goka's recovery, and on the overlay's values by IndexRange,
// so it must be cheap, deterministic and safe for concurrent use.
type Indexer func(key string, value []byte, put func(sub, meta []byte))

// Index makes the stores keep a secondary index of their values (see
// IndexRange). version names the Indexer's output: a store written with
// another version (or none) rebuilds its index at open. Call it before the
// stores are built.
func (s *Stores) Index(version string, ix Indexer) {
	s.indexer, s.indexVersion = ix, version
}

// isIndex says whether a LevelDB key belongs to the secondary index.
func isIndex(k []byte) bool { return bytes.HasPrefix(k, []byte(IndexPrefix)) }

// indexEntry is one secondary entry of a value.
type indexEntry struct{ sub, meta string }

// entries lists the secondary entries of key's value (none for nil).
func (s *store) entries(key string, value []byte, out []indexEntry) []indexEntry {
	if value == nil || s.stores.indexer == nil {
		return out
	}
	s.stores.indexer(key, value, func(sub, meta []byte) {
		out = append(out, indexEntry{string(sub), string(meta)})
	})
	return out
}

// putIndex adds to b the changes of the secondary index for key's value
// going from old to value (nil: none): the entries only old has are
// deleted, the new ones put.
func (s *store) putIndex(b *leveldb.Batch, key string, old, value []byte) {
	if s.stores.indexer == nil {
		return
	}
	was := s.entries(key, old, nil)
	now := s.entries(key, value, nil)
	for _, e := range was {
		if !slices.Contains(now, e) {
			b.Delete([]byte(IndexPrefix + e.sub))
		}
	}
	for _, e := range now {
		if !slices.Contains(was, e) {
			b.Put([]byte(IndexPrefix+e.sub), indexValue(key, e.meta))
		}
	}
}

// indexValue is the LevelDB value of an entry of key: uvarint(len(key)) +
// key + meta.
func indexValue(key, meta string) []byte {
	v := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(key)+len(meta)), uint64(len(key)))
	return append(append(v, key...), meta...)
}

// parseIndexValue splits an entry's LevelDB value into its key and meta.
func parseIndexValue(v []byte) (key string, meta []byte, err error) {
	n, w := binary.Uvarint(v)
	if w <= 0 || uint64(len(v)-w) < n {
		return "", nil, fmt.Errorf("localstore: index entry value %q malformed", v)
	}
	return string(v[w : w+int(n)]), v[w+int(n):], nil
}

// oldValue is what LevelDB holds for key before the batch being built:
// pending holds the values the batch already writes (nil: a delete), and
// those LevelDB holds that the writer knew (keptValues).
func (s *store) oldValue(key string, pending map[string][]byte) ([]byte, error) {
	if v, ok := pending[key]; ok {
		return v, nil
	}
	s.oldReads.Add(1)
	v, err := s.db.Get([]byte(key), nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("localstore: read %q in %s before indexing its write: %w", key, s.path, err)
	}
	return v, nil
}

// ensureIndex, at open, makes the index of db match the stores' Indexer:
// an empty store is stamped with the version; one written with another
// version (or before the index) has its index rebuilt from its values; with
// no Indexer, a store's stamp is removed (its index is not kept up to date).
func (s *store) ensureIndex(db *leveldb.DB, empty bool) error {
	have, err := db.Get([]byte(IndexPrefix), nil)
	found := err == nil
	if err != nil && !errors.Is(err, leveldb.ErrNotFound) {
		return fmt.Errorf("localstore: read index version in %s: %w", s.path, err)
	}
	switch {
	case s.stores.indexer == nil:
		if found {
			return db.Delete([]byte(IndexPrefix), nil)
		}
		return nil
	case found && string(have) == s.stores.indexVersion:
		return nil
	case empty:
		return db.Put([]byte(IndexPrefix), []byte(s.stores.indexVersion), nil)
	}
	start := time.Now()
	s.log.Info("local store: rebuilding its secondary index", "from_version", string(have), "to_version", s.stores.indexVersion)
	b := new(leveldb.Batch)
	flush := func() error {
		if b.Len() == 0 {
			return nil
		}
		err := db.Write(b, nil)
		b.Reset()
		return err
	}
	it := db.NewIterator(&util.Range{Start: []byte(IndexPrefix), Limit: []byte(indexEnd)}, &opt.ReadOptions{DontFillCache: true})
	for it.Next() {
		b.Delete(slices.Clone(it.Key()))
		if b.Len() >= 10*restoreBatch {
			if err := flush(); err != nil {
				it.Release()
				return fmt.Errorf("localstore: drop old index in %s: %w", s.path, err)
			}
		}
	}
	it.Release()
	if err := errors.Join(it.Error(), flush()); err != nil {
		return fmt.Errorf("localstore: drop old index in %s: %w", s.path, err)
	}
	n := 0
	it = db.NewIterator(nil, &opt.ReadOptions{DontFillCache: true})
	defer it.Release()
	for ok := it.First(); ok; {
		k := it.Key()
		if isIndex(k) {
			ok = it.Seek([]byte(indexEnd))
			continue
		}
		if !isInternal(k) {
			s.putIndex(b, string(k), nil, it.Value())
			n++
			if b.Len() >= 10*restoreBatch {
				if err := flush(); err != nil {
					return fmt.Errorf("localstore: rebuild index in %s: %w", s.path, err)
				}
			}
		}
		ok = it.Next()
	}
	b.Put([]byte(IndexPrefix), []byte(s.stores.indexVersion))
	if err := errors.Join(it.Error(), flush()); err != nil {
		return fmt.Errorf("localstore: rebuild index in %s: %w", s.path, err)
	}
	s.log.Info("local store: secondary index rebuilt", "keys", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// IndexVersion is the version of the secondary index the store keeps
// (Stores.Index), "" if none.
func (s *store) IndexVersion() string {
	if s.stores.indexer == nil {
		return ""
	}
	return s.stores.indexVersion
}

// IndexRange calls fn, in sub order, with the secondary entries whose sub
// is in [from, to) (to nil: no end) as the table is now: LevelDB's entries
// of the keys the overlay does not hold, merged with the entries of the
// overlay's values. fn's arguments are valid during the call only; it
// returns false to stop. Safe for concurrent use; it costs O(overlay) to
// start and then what it reads.
func (s *store) IndexRange(from, to []byte, fn func(sub []byte, key string, meta []byte) bool) error {
	if s.db == nil {
		return errNotOpen
	}
	if s.stores.indexer == nil {
		return fmt.Errorf("localstore: %s keeps no index", s.path)
	}
	if len(from) == 0 {
		from = []byte{0} // the version key's empty sub is no entry
	}
	inRange := func(sub string) bool { return sub >= string(from) && (to == nil || sub < string(to)) }
	type overEntry struct{ sub, key, meta string }
	var over []overEntry
	var shadow map[string]bool
	s.readers.RLock()
	defer s.readers.RUnlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("localstore: read index in %s: %w", s.path, errNotOpen)
	}
	if !s.recovered.Load() {
		if err := s.writeRestored(); err != nil {
			s.mu.Unlock()
			return err
		}
	}
	// Both under mu: the writer drops a key from the overlay only after
	// LevelDB has it, so each key's newest value is in one of the two.
	r := &util.Range{Start: append([]byte(IndexPrefix), from...), Limit: []byte(indexEnd)}
	if to != nil {
		r.Limit = append([]byte(IndexPrefix), to...)
	}
	it := s.db.NewIterator(r, nil)
	if len(s.overlay) > 0 {
		shadow = make(map[string]bool, len(s.overlay))
		var es []indexEntry
		for k, e := range s.overlay {
			shadow[k] = true
			es = s.entries(k, e.value, es[:0])
			for _, x := range es {
				if inRange(x.sub) {
					over = append(over, overEntry{x.sub, k, x.meta})
				}
			}
		}
	}
	s.mu.Unlock()
	defer it.Release()
	slices.SortFunc(over, func(a, b overEntry) int { return bytes.Compare([]byte(a.sub), []byte(b.sub)) })
	oi := 0
	valid := it.Next()
	for {
		// The next LevelDB entry whose key the overlay does not hold.
		var key string
		var meta []byte
		for valid {
			var err error
			if key, meta, err = parseIndexValue(it.Value()); err != nil {
				return fmt.Errorf("%w (in %s)", err, s.path)
			}
			if !shadow[key] {
				break
			}
			valid = it.Next()
		}
		if !valid && oi == len(over) {
			break
		}
		if valid && (oi == len(over) || bytes.Compare(it.Key()[len(IndexPrefix):], []byte(over[oi].sub)) < 0) {
			if !fn(it.Key()[len(IndexPrefix):], key, meta) {
				return nil
			}
			valid = it.Next()
			continue
		}
		o := over[oi]
		oi++
		if !fn([]byte(o.sub), o.key, []byte(o.meta)) {
			return nil
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("localstore: read index in %s: %w", s.path, err)
	}
	return nil
}
