package localstore

import (
	"time"

	"github.com/syndtr/goleveldb/leveldb"
	"github.com/syndtr/goleveldb/leveldb/opt"
)

// The store's filter of its keys (store.keys, a keyFilter: keyfilter.go): a
// key not in it is not in the store, so neither a read of it nor a restored
// tombstone of it reaches LevelDB. A store that opens empty builds the
// filter from its restore; one that opens with data, from a snapshot of its
// LevelDB after the restore, in the background (scanKeys). Writes add their
// keys; a filter that grew past twice the keys it was built with is built
// again.

// addKey adds a key written to the key filters. Called with mu held.
func (s *store) addKey(key string) {
	if s.keys != nil && s.keys.add(key) && s.scanning == nil && s.keys.keys() > 2*s.keysBuilt+keysSlack {
		s.startScan()
	}
	if s.scanning != nil {
		s.scanning.add(key)
	}
}

// keysSlack is how many keys a filter of the keys may gain beyond twice
// those it was built with before it is built again (a variable for tests).
var keysSlack = 1 << 16

// scanStarts is called by scanKeys before it reads the snapshot (tests hold
// the scan there).
var scanStarts = func() {}

// scanChunk is how many keys the scan hashes between two takes of mu.
const scanChunk = 4096

// startScan starts building the filter of the keys from a snapshot of
// LevelDB, unless the store is closed. Called with mu held.
func (s *store) startScan() {
	if s.closed || s.scanning != nil {
		return
	}
	f := newKeyFilter()
	for k, e := range s.overlay { // not in the snapshot yet, or deleted there
		if e.value != nil {
			f.add(k)
		}
	}
	snap, err := s.db.GetSnapshot()
	if err != nil {
		s.log.Warn("local store: keys not indexed; reads of absent keys go to LevelDB", "err", err)
		return
	}
	s.scanning = f
	done := make(chan struct{})
	s.scanned = done
	go s.scanKeys(f, snap, done)
}

// scanKeys adds the keys of snap to f, then makes f the store's filter of
// its keys: every key written since the snapshot was added to f by write.
// Close stops it. An error leaves the store without a filter (or with the
// one it had): reads then go to LevelDB.
func (s *store) scanKeys(f *keyFilter, snap *leveldb.Snapshot, done chan struct{}) {
	defer close(done)
	defer snap.Release()
	scanStarts()
	start := time.Now()
	it := snap.NewIterator(nil, &opt.ReadOptions{DontFillCache: true})
	defer it.Release()
	hashes := make([]uint64, 0, scanChunk)
	add := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, h := range hashes {
			f.insert(h)
		}
		hashes = hashes[:0]
		return s.scanning == f && !s.closed
	}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if isIndex(k) { // the secondary index, in one seek
			if ok = it.Seek([]byte(indexEnd)); !ok {
				break
			}
			k = it.Key()
		}
		if isInternal(k) {
			continue
		}
		hashes = append(hashes, f.hashBytes(k))
		if len(hashes) == scanChunk && !add() {
			return
		}
	}
	if !add() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scanning = nil
	if err := it.Error(); err != nil {
		s.log.Warn("local store: keys not indexed; reads of absent keys go to LevelDB", "err", err)
		if s.keys != nil { // the filter being replaced is still whole: built again after it doubles again
			s.keysBuilt = s.keys.keys()
		}
		return
	}
	s.keys, s.keysBuilt = f, f.keys()
	s.log.Debug("local store keys indexed", "keys", s.keysBuilt, "took", time.Since(start).Round(time.Millisecond))
}
