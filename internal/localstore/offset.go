package localstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/syndtr/goleveldb/leveldb"
)

// Offsets and caught-up stamps: every LevelDB write of a store carries, under
// OffsetKey, the changelog offset its records reach and when the store last
// held its changelog whole. Goka restores from that offset after a restart or
// a kill -9. The stamp bounds how long a store may stay offline (MaxOffline:
// compaction drops tombstones after a while); it is set only when a restore
// reached the changelog's end read at open (end.go), or by a clean close
// (stampCaughtUp, ClosedClean).

// OffsetKey is the LevelDB key holding the changelog offset the store has
// reached, and when the store was last known to hold everything its
// changelog had up to there ("offset,unix-millis"). It sorts before any
// user id ivrsched accepts (the prefix is reserved) and iterators skip it. A
// database without it was written by an older version, which wrote ahead of
// the changelog: it is wiped.
const OffsetKey = "__ivrsched-offset"

// neverCaughtUp stamps the offset of a store whose restore began empty and
// has not reached the changelog's end: the store never held its changelog
// whole, and the records after its offset may be older than anything it
// could tell. With MaxOffline set, such a store is wiped when opened again
// (a restore after it is cheap: the store reads its changelog itself).
var neverCaughtUp = time.UnixMilli(1)

// readOffset reads the offset the store reached, when it last held its
// changelog whole, and the changelog's topic ID ("offset,unix-millis,id";
// older versions wrote no ID, or the offset alone).
func readOffset(db *leveldb.DB) (offset int64, at time.Time, id string, found bool, err error) {
	raw, err := db.Get([]byte(OffsetKey), nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		return 0, time.Time{}, "", false, nil
	}
	if err != nil {
		return 0, time.Time{}, "", false, fmt.Errorf("localstore: read offset: %w", err)
	}
	offStr, rest, stamped := strings.Cut(string(raw), ",")
	if offset, err = strconv.ParseInt(offStr, 10, 64); err != nil {
		return 0, time.Time{}, "", false, fmt.Errorf("localstore: offset %q: %w", raw, err)
	}
	if stamped {
		atStr, idStr, _ := strings.Cut(rest, ",")
		ms, err := strconv.ParseInt(atStr, 10, 64)
		if err != nil {
			return 0, time.Time{}, "", false, fmt.Errorf("localstore: offset %q: %w", raw, err)
		}
		at, id = time.UnixMilli(ms), idStr
	}
	return offset, at, id, true, nil
}

// putOffset adds the changelog offset the batch's records reach to it, in
// the form readOffset reads, stamped at (the store holds the changelog up
// to offset as of then), with the changelog's topic ID.
func (s *store) putOffset(b *leveldb.Batch, offset int64, at time.Time) {
	v := strconv.AppendInt(nil, offset, 10)
	v = append(v, ',')
	v = strconv.AppendInt(v, at.UnixMilli(), 10)
	if s.topicID != "" {
		v = append(append(v, ','), s.topicID...)
	}
	b.Put([]byte(OffsetKey), v)
}

// stampCaughtUp, on a clean close with nothing waiting for the changelog,
// stamps the stored offset with the time: the store then holds its
// changelog whole, and nobody else writes a partition while it is owned.
// Called with mu held, after the writer stopped.
func (s *store) stampCaughtUp() error {
	s.cleanAt = -1
	if s.werr != nil || !s.recovered.Load() || len(s.overlay) > 0 {
		return nil
	}
	offset, _, _, found, err := readOffset(s.db)
	if err != nil || !found {
		return err
	}
	if s.complete {
		b := new(leveldb.Batch)
		s.putOffset(b, offset, s.stores.now())
		if err := s.db.Write(b, nil); err != nil {
			return fmt.Errorf("localstore: stamp offset in %s: %w", s.path, err)
		}
	}
	s.cleanAt = offset
	return nil
}

// ClosedClean reports, after Close, whether the store closed holding every
// write it was given (none waiting for the changelog, none lost) and the
// changelog offset it holds: the due index keeps a partition's due index
// across such a close (dueindex.CleanCloser).
func (s *store) ClosedClean() (offset int64, ok bool) {
	s.life.Lock()
	defer s.life.Unlock()
	if s.state != stateClosed {
		return -1, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cleanAt, s.cleanAt >= 0
}

func (s *store) GetOffset(def int64) (int64, error) {
	if s.db == nil {
		return 0, errNotOpen
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.offset < 0 {
		return def, nil
	}
	return s.offset, nil
}
