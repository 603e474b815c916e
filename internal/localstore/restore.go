package localstore

import (
	"fmt"
	"slices"
	"time"
)

// The restore: until MarkRecovered, Goka's Set and Delete calls (and the
// store's own read of its changelog, changelog.go) are restored records,
// written to LevelDB restoreBatch at a time with the offset reached. A store
// that opens empty is restored from the changelog's start, so a tombstone of
// a key the restore has not set has nothing to delete: the restore keeps the
// keys it set in a Bloom filter (keys.go) and writes no such tombstone, only
// the offset it reached. After users were removed a compacted changelog is
// mostly such tombstones. MarkRecovered ends the restore, and trusts it only
// if it reached the changelog's end read at open (end.go).

// restoreBatch is how many restored records go into one LevelDB write.
const restoreBatch = 1000

// restoreOffsetEvery: a restore writes the offset it reached at least every
// this many records, even when none of them had to be written (tombstones
// of keys a restore into an empty store never wrote).
const restoreOffsetEvery = 16 * restoreBatch

// restore applies a restored record (a delete if value is nil), from
// Goka's restore or the store's own reading of its changelog
// (changelog.go), and writes the batch when it is full. Called with mu
// held; the caller sets the offset.
func (s *store) restore(key string, value []byte) error {
	s.restored++
	s.stores.restored.Add(1)
	s.unwritten++
	switch {
	case s.keys == nil || value != nil || s.keys.mayHave(key):
		if err := s.putRestored(key, value); err != nil {
			return err
		}
		if s.keys != nil && value != nil {
			s.keys.add(key)
		}
	default:
		// A tombstone of a key this restore into an empty
		// database never wrote: nothing to delete (most of a
		// compacted changelog's records after users were removed).
		s.skipped++
	}
	if s.batch.Len() < restoreBatch && s.unwritten < restoreOffsetEvery {
		return nil
	}
	return s.writeRestored()
}

// putRestored adds a restored record to the batch. With an index, the
// key's old value is the batch's, or else none if the filter of the keys
// says the store does not hold the key, or else LevelDB's.
func (s *store) putRestored(key string, value []byte) error {
	var old []byte
	if s.stores.indexer != nil {
		if s.batchVals == nil {
			s.batchVals = make(map[string][]byte)
		}
		_, inBatch := s.batchVals[key]
		if inBatch || s.keys == nil || s.keys.mayHave(key) {
			var err error
			if old, err = s.oldValue(key, s.batchVals); err != nil {
				return err
			}
		}
		s.batchVals[key] = slices.Clone(value) // the caller may reuse its buffer
	}
	s.put(s.batch, key, old, value)
	return nil
}

// writeRestored writes the restored records not written yet, with the offset
// reached. Called with mu held. Once recovered it does nothing: the writer
// writes the offsets then.
func (s *store) writeRestored() error {
	if s.batch == nil || s.recovered.Load() {
		return nil
	}
	// The offset too when only skipped tombstones moved it.
	if s.offset >= 0 && (s.batch.Len() > 0 || s.offset != s.storedOffset) {
		s.putOffset(s.batch, s.offset, s.restoreStamp)
	}
	if s.batch.Len() == 0 {
		return nil
	}
	if err := s.db.Write(s.batch, nil); err != nil {
		return fmt.Errorf("localstore: write restored records in %s: %w", s.path, err)
	}
	s.batch.Reset()
	clear(s.batchVals)
	s.unwritten, s.storedOffset = 0, s.offset
	return nil
}

// SetOffset records the offset of the record Goka restored last. After the
// restore the offsets come with the acknowledgements instead.
func (s *store) SetOffset(offset int64) error {
	if s.db == nil {
		return errNotOpen
	}
	if s.recovered.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offset = offset
	return nil
}

// MarkRecovered ends the restore. A restore that reached the changelog's
// end read at open stamps the store caught up as of that read; one that
// stopped short of it (Goka calls MarkRecovered after a revoke cut the
// restore off) fails; with the end not known the store takes callbacks'
// writes but is not stamped. After Close it does nothing (end.go).
func (s *store) MarkRecovered() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.state != stateOpen {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.reachedEnd():
		s.complete = true
		s.restoreStamp = s.end.at
		if s.offset >= 0 {
			s.storedOffset = -1 // write the offset with the new stamp
		}
	case s.end.known():
		if err := s.writeRestored(); err != nil {
			return err
		}
		return fmt.Errorf("localstore: restore of %s stopped at offset %d, before the changelog's end at open (high-water mark %d): not trusted",
			s.path, s.offset, s.end.hwm)
	}
	if err := s.writeRestored(); err != nil {
		return err
	}
	s.recovered.Store(true)
	s.gen++ // a read that began during the restore keeps nothing (remember)
	if s.keys == nil {
		s.startScan()
	} else {
		s.keysBuilt = s.keys.keys()
	}
	s.log.Info("local store recovered", "records_restored", s.restored, "tombstones_skipped", s.skipped, "offset", s.offset,
		"took", time.Since(s.opened).Round(time.Millisecond))
	return nil
}
