package localstore

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lovoo/goka/storage"
	"github.com/syndtr/goleveldb/leveldb"
	lvlerrors "github.com/syndtr/goleveldb/leveldb/errors"
	"github.com/syndtr/goleveldb/leveldb/filter"
	"github.com/syndtr/goleveldb/leveldb/opt"
	lvlstorage "github.com/syndtr/goleveldb/leveldb/storage"
)

// The storage: Stores, one per process, builds a store per table partition
// (Builder), each a LevelDB database under dir/<topic>.<partition>. Goka's
// own LevelDB storage writes a value when ctx.SetValue is called, before
// Kafka has acknowledged the changelog write, so after a kill -9 it may hold
// writes Kafka never got and cannot be trusted: a crash costs a restore of
// the whole changelog. A store here writes to LevelDB only what the changelog
// holds (overlay.go), with the offset it reached (offset.go), so after a
// kill -9 Goka restores only the changelog's tail.
//
// Open takes LevelDB's directory lock (the LOCK file) before it looks at or
// wipes anything, so two processes never share a partition directory: a
// second Open of the same directory fails with an error naming it. A
// database that cannot be trusted (written by an older version, corrupt,
// offline too long, or not matching its changelog: end.go) is wiped and
// restored from the changelog.

// Files LevelDB's file storage holds open while the database directory is
// locked. They carry no table state and are kept when the state is wiped:
// deleting LOCK while holding it would let another process lock a fresh inode
// of the same name.
var keepOnWipe = map[string]bool{
	"LOCK":    true,
	"LOG":     true,
	"LOG.old": true,
}

// Clock tells the time. It is the part of internal/clock's Clock the stores
// use, declared here so that this package imports nothing of the project's
// but its contract (a leaf: .ci/imports); any clock.Clock is one.
type Clock interface {
	Now() time.Time
}

// Stores are the local stores of the group tables of one process's
// processors, under one directory: dir/<topic>.<partition>.
type Stores struct {
	dir    string
	log    *slog.Logger
	marker Marker
	// indexer and indexVersion: the secondary index (index.go), if set.
	indexer      Indexer
	indexVersion string

	// MaxOffline: a store last caught up with its changelog longer ago
	// than this is wiped and restored from the changelog instead of
	// reused. Compaction drops a tombstone delete.retention.ms after it was
	// written; a store that missed it for that long would bring the
	// deleted key back. 0: no limit (the changelog writes no tombstones).
	MaxOffline time.Duration
	// Clock stamps the offset writes; nil: the wall clock.
	Clock Clock

	// changelog, if set, is what the stores read their changelogs with
	// before Goka restores them (ReadChangelog), and their ends (end.go).
	changelog *changelogReader
	// readEnd, if set, reads the changelogs' ends instead (tests).
	readEnd func(topic string, partition int32) (changelogEnd, error)

	// restored counts the changelog records restored into these stores;
	// direct those of them the stores read themselves.
	restored, direct atomic.Int64

	mu sync.Mutex // serialises changes of open
	// open is an immutable snapshot: table topic -> partition -> store,
	// replaced on every Open and Close.
	open atomic.Pointer[map[string]map[int32]*store]
}

// New returns the stores under dir. A nil log uses slog.Default().
func New(dir string, log *slog.Logger) *Stores {
	if log == nil {
		log = slog.Default()
	}
	s := &Stores{dir: dir, log: log}
	s.open.Store(&map[string]map[int32]*store{})
	return s
}

// Restored is how many changelog records were restored into these stores
// since they were made, by Goka or by their own reads (restore progress,
// for metrics).
func (s *Stores) Restored() int64 { return s.restored.Load() }

// ReadDirectly is how many of the records restored into these stores they
// read from their changelogs themselves (ReadChangelog).
func (s *Stores) ReadDirectly() int64 { return s.direct.Load() }

func (s *Stores) now() time.Time {
	if s.Clock == nil {
		return time.Now()
	}
	return s.Clock.Now()
}

// Builder returns a goka storage.Builder for these stores. It only validates
// its arguments and allocates; all disk access happens in the storage's Open
// and Close.
func (s *Stores) Builder() storage.Builder {
	return func(topic string, partition int32) (storage.Storage, error) {
		if topic == "" || strings.ContainsAny(topic, `/\`) {
			return nil, fmt.Errorf("localstore: invalid topic name %q", topic)
		}
		if partition < 0 {
			return nil, fmt.Errorf("localstore: invalid partition %d for topic %s", partition, topic)
		}
		path := filepath.Join(s.dir, fmt.Sprintf("%s.%d", topic, partition))
		return &store{
			stores:    s,
			marker:    s.marker,
			topic:     topic,
			partition: partition,
			path:      path,
			log:       s.log.With("topic", topic, "partition", partition, "dir", path),
			cleanAt:   -1,
			recent:    newRecent(recentBytes),
		}, nil
	}
}

// register makes st the store acknowledgements of its partition go to (nil
// st: none).
func (s *Stores) register(topic string, partition int32, st *store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.open.Load()
	next := make(map[string]map[int32]*store, len(old)+1)
	for t, parts := range old {
		next[t] = parts
	}
	parts := make(map[int32]*store, len(old[topic])+1)
	for p, x := range old[topic] {
		parts[p] = x
	}
	if st == nil {
		delete(parts, partition)
	} else {
		parts[partition] = st
	}
	next[topic] = parts
	s.open.Store(&next)
}

type state int

const (
	stateNew state = iota
	stateOpen
	stateClosed
)

// store is one table partition's LevelDB, with the writes not yet
// acknowledged by the changelog in memory.
type store struct {
	stores    *Stores
	marker    Marker // nil: no marks
	topic     string
	partition int32
	path      string
	log       *slog.Logger

	life  sync.Mutex // Open and Close
	state state
	// readers is held shared by reads of the index from other goroutines
	// (IndexRange) and exclusively by Close before it closes LevelDB,
	// which must not close under an iterator.
	readers sync.RWMutex
	files   lvlstorage.Storage // LevelDB file storage: holds the directory lock
	// db is set once by a successful Open (goka calls the data methods only
	// after Open has returned) and never cleared.
	db *leveldb.DB

	// recovered is atomic for SetOffset, which Goka calls on every
	// acknowledged write and which then has nothing to do.
	recovered atomic.Bool
	opened    time.Time
	// end is where the changelog ended when the store opened (end.go),
	// topicID the changelog's topic ID the offsets are written with.
	end      changelogEnd
	topicID  string
	restored int           // records Goka restored into the store (Set and Delete before MarkRecovered)
	skipped  int           // of those, tombstones not written: the key was not in the store
	stop     chan struct{} // closed by Close: the writer drains and ends
	written  chan struct{} // closed by the writer when it ends
	kick     chan struct{} // an acknowledgement is waiting

	mu sync.Mutex // everything below
	// While Goka restores the partition (until MarkRecovered) the restored
	// records are collected in batch and written restoreBatch at a time,
	// with the offset reached.
	batch *leveldb.Batch
	// batchVals: the values batch writes, by key (nil: a delete), kept
	// while the stores keep an index, whose writes need each key's old value.
	batchVals map[string][]byte
	// unwritten counts the records restored since the last LevelDB write,
	// skipped tombstones included.
	unwritten int
	// storedOffset is the offset LevelDB holds (-1: none).
	storedOffset int64
	// restoreStamp stamps the offsets written while restoring: the time
	// the store last held its changelog whole (what it read at open), since
	// a store partly restored holds it only as of then; neverCaughtUp for a
	// store that began empty. MarkRecovered stamps the time of the end of
	// the restore.
	restoreStamp time.Time
	// keys holds every key the store may have, in LevelDB or the overlay
	// (nil: not known). A store that opens empty starts it empty, and its
	// restore and then its writes add to it: a restored tombstone of a key
	// not in it deletes nothing and is not written, and after the restore
	// a read of such a key needs no LevelDB Get. A store that opens with
	// data has none until scanKeys has read the keys of its LevelDB, after
	// the restore, in the background; then scanning is the filter being
	// built, which writes add to as well. keysBuilt is the number of keys
	// the filter had when it was built: a filter that grew past twice that
	// (keys written and deleted since stay in it) is built again.
	keys      *keyFilter
	scanning  *keyFilter
	keysBuilt int
	scanned   chan struct{} // closed when the scan running (or last run) ends; nil: none ran
	// offset is the changelog offset of the last record applied (restored,
	// or acknowledged and given to the writer); -1 if none.
	offset int64
	// overlay holds what callbacks set since the restore and the changelog
	// has not acknowledged yet (or the writer has not written yet).
	overlay map[string]*entry
	// recent keeps the values LevelDB had for the keys read or written
	// last (recentBytes), for reads after the restore; gen counts the
	// callbacks' writes, so that a read whose LevelDB Get raced with a
	// write keeps nothing (remember).
	recent *recent
	gen    uint64
	// oldReads counts the old values read from LevelDB (oldValue) for the
	// index by the writer and the restore.
	oldReads atomic.Int64
	acks     []ack     // acknowledged, for the writer
	wrote    sync.Cond // broadcast when the writer wrote a batch (tests wait on it)
	closed   bool      // no more acknowledgements
	werr     error     // the writer failed: the store takes no more writes
	// cleanAt is the offset a clean close stamped (stampCaughtUp), -1
	// after any other close.
	cleanAt int64
	// complete: the restore reached the changelog's end read at open
	// (MarkRecovered); only then is the store stamped caught up.
	complete bool
}

var errNotOpen = errors.New("localstore: storage not open")

// Open locks the partition directory, opens the LevelDB and reads the
// changelog offset it reached. A database that cannot be trusted (written by
// an older version, or corrupt) is wiped, so that Goka restores it from the
// changelog. A store far behind its changelog then reads it itself
// (catchUp), when the stores have a Kafka connection (ReadChangelog).
func (s *store) Open() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.state != stateNew {
		return fmt.Errorf("localstore: open %s: storage already opened", s.path)
	}
	// Any failure below leaves the store unusable; Close is then a no-op
	// (goka calls Close after a failed Open).
	s.state = stateClosed
	s.opened = time.Now()

	_, statErr := os.Stat(s.path)
	existed := statErr == nil

	// The directory holds users' values (phone numbers): only this user
	// may enter it. goleveldb would make it 0755 and its files 0644
	// (fixed modes); behind a 0700 directory they are out of others'
	// reach, whatever the process's umask, and one of an older version is
	// closed too.
	if err := os.MkdirAll(s.path, 0o700); err != nil {
		return fmt.Errorf("localstore: make directory %s: %w", s.path, err)
	}
	if err := os.Chmod(s.path, 0o700); err != nil {
		return fmt.Errorf("localstore: make directory %s private: %w", s.path, err)
	}
	// Take LevelDB's directory lock first: nothing may be inspected or
	// removed while another process might be using the directory.
	files, err := lvlstorage.OpenFile(s.path, false)
	if err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EAGAIN) {
			return fmt.Errorf("localstore: leveldb directory %s is locked (in use by another process or storage?): %w", s.path, err)
		}
		return fmt.Errorf("localstore: open leveldb directory %s: %w", s.path, err)
	}
	s.readEnd()
	db, offset, stamp, err := s.openTrusted(files, existed)
	if err == nil {
		if err = s.ensureIndex(db, offset < 0); err != nil {
			err = errors.Join(err, db.Close())
		}
	}
	if err != nil {
		if cerr := files.Close(); cerr != nil {
			s.log.Warn("closing leveldb file storage after failed open", "err", cerr)
		}
		return err
	}

	s.files, s.db = files, db
	s.offset, s.storedOffset, s.restoreStamp = offset, offset, stamp
	s.batch = new(leveldb.Batch)
	if offset < 0 { // an empty database: Goka restores the whole changelog
		s.keys = newKeyFilter()
	}
	s.overlay = make(map[string]*entry)
	s.wrote.L = &s.mu
	s.catchUp()
	s.stop, s.written, s.kick = make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
	s.state = stateOpen
	go s.writer()
	s.stores.register(s.topic, s.partition, s)
	return nil
}

// openTrusted runs with the directory locked: it opens the LevelDB and
// returns it with the offset it reached and the time it last held its
// changelog whole, after wiping it if it cannot be trusted.
func (s *store) openTrusted(files lvlstorage.Storage, existed bool) (*leveldb.DB, int64, time.Time, error) {
	db, offset, at, err := s.openTrustedDB(files, existed)
	if offset < 0 || at.IsZero() { // empty, or stamped by an older version
		at = neverCaughtUp
	}
	return db, offset, at, err
}

func (s *store) openTrustedDB(files lvlstorage.Storage, existed bool) (*leveldb.DB, int64, time.Time, error) {
	db, err := leveldb.Open(files, levelOptions)
	switch {
	case lvlerrors.IsCorrupted(err):
		s.log.Warn("local store corrupt, restoring from changelog", "err", err)
	case err != nil:
		return nil, 0, time.Time{}, fmt.Errorf("localstore: open leveldb in %s: %w", s.path, err)
	default:
		offset, at, id, found, err := readOffset(db)
		switch {
		case err != nil:
			s.log.Warn("local offset unreadable, restoring from changelog", "err", err)
		case found && s.untrusted(offset, id) != "":
			s.log.Warn("local store does not match its changelog, restoring from changelog", "reason", s.untrusted(offset, id))
		case found && s.stores.MaxOffline > 0 && !at.IsZero() && s.stores.now().Sub(at) > s.stores.MaxOffline:
			s.log.Warn("local store last caught up with its changelog too long ago (tombstones may have been compacted away since), restoring from changelog",
				"offset", offset, "caught_up", at.UTC().Format(time.RFC3339), "max_offline", s.stores.MaxOffline)
		case found:
			s.log.Info("local store reused; restoring the changelog after its offset", "offset", offset)
			s.topicID = cmp.Or(s.topicID, id) // the changelog's, when known
			return db, offset, at, nil
		case !existed:
			s.log.Info("first start, creating local store")
			return db, -1, time.Time{}, nil
		default:
			empty, ierr := isEmpty(db)
			if ierr == nil && empty {
				s.log.Info("no local state, restoring from changelog")
				return db, -1, time.Time{}, nil
			}
			s.log.Warn("local store holds no changelog offset (written by an older version), restoring from changelog")
		}
		if cerr := db.Close(); cerr != nil {
			return nil, 0, time.Time{}, fmt.Errorf("localstore: close leveldb in %s before wiping it: %w", s.path, cerr)
		}
	}
	if err := s.wipe(); err != nil {
		return nil, 0, time.Time{}, err
	}
	db, err = leveldb.Open(files, levelOptions)
	if err != nil {
		return nil, 0, time.Time{}, fmt.Errorf("localstore: open leveldb in %s: %w", s.path, err)
	}
	return db, -1, time.Time{}, nil
}

// isEmpty reports a database holding no table state (an index version
// stamp at most).
func isEmpty(db *leveldb.DB) (bool, error) {
	it := db.NewIterator(nil, nil)
	defer it.Release()
	ok := it.First()
	if ok && isIndex(it.Key()) {
		ok = it.Seek([]byte(indexEnd))
	}
	return !ok, it.Error()
}

// wipe removes everything in the partition directory except the lock and log
// files LevelDB's file storage holds open.
func (s *store) wipe() error {
	entries, err := os.ReadDir(s.path)
	if err != nil {
		return fmt.Errorf("localstore: read leveldb directory %s: %w", s.path, err)
	}
	for _, e := range entries {
		if keepOnWipe[e.Name()] {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.path, e.Name())); err != nil {
			return fmt.Errorf("localstore: wipe leveldb directory %s: %w", s.path, err)
		}
	}
	return nil
}

// Close writes what has been acknowledged (and, during a restore, what has
// been restored), closes the LevelDB and releases the directory lock. Writes
// not acknowledged by then are dropped: the changelog's tail brings back
// those that reached it. Close on a storage that was never opened
// successfully, or that is already closed, does nothing.
func (s *store) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.state != stateOpen {
		return nil
	}
	s.state = stateClosed
	s.stores.register(s.topic, s.partition, nil)
	close(s.stop)
	<-s.written

	s.mu.Lock()
	s.closed = true // the scan stops at its next chunk
	scanned := s.scanned
	s.mu.Unlock()
	if scanned != nil {
		<-scanned
	}

	s.readers.Lock() // no IndexRange reads LevelDB now; later ones see closed
	defer s.readers.Unlock()
	var errs []error
	s.mu.Lock()
	s.recent = newRecent(0) // keeps nothing: a read after Close fails as before
	s.keys, s.scanning = nil, nil
	if err := s.writeRestored(); err != nil {
		errs = append(errs, err)
	}
	if s.werr != nil {
		errs = append(errs, s.werr)
	}
	if err := s.stampCaughtUp(); err != nil {
		errs = append(errs, err)
	}
	s.mu.Unlock()
	if err := s.db.Close(); err != nil {
		errs = append(errs, fmt.Errorf("localstore: close leveldb in %s: %w", s.path, err))
	}
	if err := s.files.Close(); err != nil {
		errs = append(errs, fmt.Errorf("localstore: release leveldb directory %s: %w", s.path, err))
	}
	if len(errs) > 0 {
		s.log.Warn("closing local store", "err", errors.Join(errs...))
	}
	return errors.Join(errs...)
}

// levelOptions size LevelDB for many small stores in one process (one per
// table partition): 2 MiB memtables instead of LevelDB's 4 MiB. With
// 1,000,000 pending follow-ups on 8 partitions this took the process from
// 605 to 359 MB RSS; 1 MiB memtables saved 60 MB more but doubled the p99
// lateness (compactions).
//
// There is no block cache. Without one, goleveldb keeps each open table's
// index and bloom filter in memory (under 1 % of the local disk with 30 M
// pending; TestOpenTablesHoldOnlyTheirIndexes), so reading a key below the
// memtable reads the one data block that holds it
// (TestReadPastTheMemtableReadsOneBlock). A block cache holds those blocks
// beside the data blocks read, and each read of a follow-up written long
// before evicts some: with one partition's share of 10 M pending and a
// 2 MiB cache a read cost 16 µs and 1.4 file reads, 61 µs and 4.2 while
// compactions ran, against 9.4 µs and one, 12.8 µs and 1.13 without
// (BenchmarkGetPastTheMemtable). The OS's page cache keeps the data
// blocks. Up to 4,096 tables (8 GiB) of a store stay open, one file
// descriptor each. Tables carry bloom filters (10 bits per key), so
// reading a key that is not there skips the tables.
//
// goleveldb's buffer pool is off. It hands a request for more than 16 KiB
// whatever large buffer it holds, and each compaction puts back its table
// writer's 2 MiB: the next table opened took that buffer for its index or
// filter and kept all of it while it stayed open. With 30 M pending that
// was 600 MB of a 734 MiB heap (docs/bench/journal/2026-12-04-buffer-pool.md).
// Without the pool a read past the memtable allocates its block (7 KiB
// instead of 1 KiB a read) and costs 9.4 µs instead of 5.8.
//
// Seek-triggered compactions are off. LevelDB charges a "seek" to a table
// each time a read looks at it and then at a table below (the bloom filter
// answering no counts too) and compacts the table after 100 of them: with
// a level-0 table from the last memtable over level 1, the first hundred
// fires after a quiet spell compacted every partition's newest table at
// the same moment, hundreds of milliseconds each with 1 M pending (the
// LOG of each store shows "table@compaction L0·1 -> L1·3" at the window's
// start), and fires waited for a core behind them.
//
// Level 0 is compacted at two tables instead of LevelDB's four. Level-0
// tables overlap one another, so a read looks in each (its index block,
// then its filter) before it reaches level 1; without the compactions by
// seeks nothing else merged them, and the three tables an intake of 25,000
// follow-ups per partition left stayed under the trigger of four until the
// next intake: at 50,000 fires a second LevelDB's Get took two thirds more
// CPU than with them on (the process fell seconds behind). At two, at most
// one level-0 table outlives a flush by more than its compaction, and the
// compaction comes with a write, not with the first reads after a quiet
// spell.
//
// Level 1 holds 10 MiB, not goleveldb's 100 (CompactionTotalSize: level n
// holds it times 10^n). Keys written in random order (users, and the due
// keys of the secondary index) make every level-0 table overlap all of
// level 1, so each compaction of level 0 rewrote level 1 whole: with 10 M
// follow-ups pending and their due keys, up to 100 MiB per 4 MiB flushed,
// and the scheduler applied commands at a fifth of its rate.
var levelOptions = &opt.Options{
	Filter:                 filter.NewBloomFilter(10),
	WriteBuffer:            2 << 20,
	DisableBlockCache:      true,
	DisableBufferPool:      true,
	OpenFilesCacheCapacity: 4096,
	DisableSeeksCompaction: true,
	CompactionL0Trigger:    2,
	CompactionTotalSize:    1 << 20,
}
