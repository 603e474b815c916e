// Package localstore keeps Goka group tables in local LevelDB databases that
// survive a kill -9 without a full restore.
//
// ivrsched's Goka processors keep their group tables locally, one LevelDB
// database per table partition, and recover them from the table's compacted
// changelog topic in Kafka. Goka's own LevelDB storage writes a value locally
// when ctx.SetValue is called, before Kafka has acknowledged the changelog
// write: after a kill -9 the local store may hold writes Kafka never got
// while the input that caused them is consumed again, so such a store must
// not be trusted, and a crash costs a restore of the whole changelog.
//
// This storage writes to LevelDB only what the changelog holds. A value set
// by a callback waits in memory (the overlay, which reads see first) until
// its changelog write is acknowledged; then it is written to LevelDB in one
// batch with the changelog offset it reached. The database is therefore
// always a prefix of the changelog, exactly: after a kill -9 Goka reads the
// stored offset and restores only the changelog's tail from there, replaying
// what the crash left unacknowledged the same way a full restore would.
//
// Acknowledgements reach the stores through the processor's producer:
// Stores.Producer wraps the producer builder so that every acknowledged write
// to a table topic is handed to the store of its partition. A processor
// must use both Stores.Builder and Stores.Producer.
//
// A store that opens empty (new, or wiped) is restored from the changelog's
// start, so it has nothing for a tombstone of a key the restore has not set
// to delete: it keeps the keys the restore set in a Bloom filter
// (keyFilter) and writes no such tombstone to LevelDB, only the offset it
// reached. After users were removed a compacted changelog is mostly such
// tombstones.
//
// A store is stamped caught up with its changelog only when its restore
// reached the changelog's high-water mark read when it opened (end.go):
// Goka also ends a restore that a revoke cut off with MarkRecovered. A
// store past that high-water mark, or recorded for another topic ID (the
// changelog was recreated or truncated), is wiped and restored.
//
// A store that opens far behind its changelog (after a move to another
// instance, or a wipe) can read the changelog itself before Goka restores
// it (Stores.ReadChangelog, changelog.go): the same records, applied by the
// same rules, in a third of the CPU; Goka's restore then has only the tail
// left, and takes over from wherever an error stops that read.
//
// Reads after the restore look in the overlay, then in a Bloom filter of
// the keys the store may hold (keys: a key not in it is absent), then in
// the values the store last read from LevelDB or wrote to it (recent, a
// bounded cache kept by the same lock), then in LevelDB: a callback mostly
// reads a key a callback of its partition read or wrote moments before,
// or one the store never held (a new user). A store that opens empty
// builds the filter from its restore; one that opens with data, from a
// snapshot of its LevelDB after the restore, in the background (scanKeys).
//
// A store can also mark keys (Stores.Mark): it keeps the keys whose value a
// Marker accepts in an index of their own, written to LevelDB in the same
// batches as the values, so that Marked lists them at a cost proportional
// to their number, after a kill -9 too.
//
// Two processes must not share a partition directory: Open takes LevelDB's
// directory lock (the LOCK file) before it looks at or wipes anything, and a
// second Open of the same directory fails with an error naming it.
package localstore

import (
	"cmp"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/syndtr/goleveldb/leveldb"
	lvlerrors "github.com/syndtr/goleveldb/leveldb/errors"
	"github.com/syndtr/goleveldb/leveldb/filter"
	"github.com/syndtr/goleveldb/leveldb/opt"
	lvlstorage "github.com/syndtr/goleveldb/leveldb/storage"
	"github.com/syndtr/goleveldb/leveldb/util"

	"github.com/ivrsched/ivrsched/internal/clock"
)

// OffsetKey is the LevelDB key holding the changelog offset the store has
// reached, and when the store was last known to hold everything its
// changelog had up to there ("offset,unix-millis"). It sorts before any
// user id ivrsched accepts (the prefix is reserved) and iterators skip it. A
// database without it was written by an older version, which wrote ahead of
// the changelog: it is wiped.
const OffsetKey = "__ivrsched-offset"

// MarkPrefix starts the LevelDB keys of the marks: MarkPrefix + the marked
// key. The marks sort right before OffsetKey; iterators skip them.
const MarkPrefix = "__ivrsched-mark/"

// markEnd is the first key after the marks.
const markEnd = "__ivrsched-mark0"

// Marker says whether a table value is marked. It is called on every write
// (restored or acknowledged), from the store's writer and Goka's recovery,
// so it must be cheap and safe for concurrent use.
type Marker func(value []byte) bool

// Files LevelDB's file storage holds open while the database directory is
// locked. They carry no table state and are kept when the state is wiped:
// deleting LOCK while holding it would let another process lock a fresh inode
// of the same name.
var keepOnWipe = map[string]bool{
	"LOCK":    true,
	"LOG":     true,
	"LOG.old": true,
}

// maxUnacked bounds the writes a store keeps in memory waiting for the
// changelog's acknowledgement. The producer blocks long before this; reaching
// it means the processor's producer was not wrapped by Stores.Producer.
var maxUnacked = 1 << 20

// restoreBatch is how many restored records go into one LevelDB write.
const restoreBatch = 1000

// restoreOffsetEvery: a restore writes the offset it reached at least every
// this many records, even when none of them had to be written (tombstones
// of keys a restore into an empty store never wrote).
const restoreOffsetEvery = 16 * restoreBatch

// Stores are the local stores of the group tables of one process's
// processors, under one directory: dir/<topic>.<partition>.
type Stores struct {
	dir    string
	log    *slog.Logger
	marker Marker

	// MaxOffline: a store last caught up with its changelog longer ago
	// than this is wiped and restored from the changelog instead of
	// reused. Compaction drops a tombstone delete.retention.ms after it was
	// written; a store that missed it for that long would bring the
	// deleted key back. 0: no limit (the changelog writes no tombstones).
	MaxOffline time.Duration
	// Clock stamps the offset writes; nil: the wall clock.
	Clock clock.Clock

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

// Mark makes the stores keep an index of the keys whose value m accepts
// (see Marked). Call it before the stores are built.
func (s *Stores) Mark(m Marker) { s.marker = m }

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

// Producer wraps a producer builder so that the acknowledged writes to the
// table topics of these stores reach them.
func (s *Stores) Producer(build goka.ProducerBuilder) goka.ProducerBuilder {
	return func(brokers []string, clientID string, hasher func() hash.Hash32) (goka.Producer, error) {
		p, err := build(brokers, clientID, hasher)
		if err != nil {
			return nil, err
		}
		return &ackingProducer{Producer: p, stores: s}, nil
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

// ackingProducer hands every acknowledged write to a table topic to the
// store of its partition. The stores are looked up when the write is
// emitted: Goka emits a table write right after setting it in the store,
// on the partition's goroutine, so the store open then is the one that
// holds the write (not a later store of the same partition).
type ackingProducer struct {
	goka.Producer
	stores *Stores
}

func (p *ackingProducer) Emit(topic, key string, value []byte) *goka.Promise {
	return p.EmitWithHeaders(topic, key, value, nil)
}

func (p *ackingProducer) EmitWithHeaders(topic, key string, value []byte, headers goka.Headers) *goka.Promise {
	parts := (*p.stores.open.Load())[topic]
	prom := p.Producer.EmitWithHeaders(topic, key, value, headers)
	if parts == nil {
		return prom
	}
	return prom.ThenWithMessage(func(msg *sarama.ProducerMessage, err error) {
		if err != nil || msg == nil {
			return // the processor fails on it; the write stays unacknowledged
		}
		if st := parts[msg.Partition]; st != nil {
			st.acked(key, value, msg.Offset)
		}
	})
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
	files lvlstorage.Storage // LevelDB file storage: holds the directory lock
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
	acks   []ack     // acknowledged, for the writer
	wrote  sync.Cond // broadcast when the writer wrote a batch (tests wait on it)
	closed bool      // no more acknowledgements
	werr   error     // the writer failed: the store takes no more writes
	// cleanAt is the offset a clean close stamped (stampCaughtUp), -1
	// after any other close.
	cleanAt int64
	// complete: the restore reached the changelog's end read at open
	// (MarkRecovered); only then is the store stamped caught up.
	complete bool
}

type entry struct {
	value    []byte // nil: deleted
	inflight int    // writes of the key not yet written to LevelDB
}

type ack struct {
	key    string
	value  []byte // nil: a delete
	offset int64
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

// neverCaughtUp stamps the offset of a store whose restore began empty and
// has not reached the changelog's end: the store never held its changelog
// whole, and the records after its offset may be older than anything it
// could tell. With MaxOffline set, such a store is wiped when opened again
// (a restore after it is cheap: the store reads its changelog itself).
var neverCaughtUp = time.UnixMilli(1)

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

func isEmpty(db *leveldb.DB) (bool, error) {
	it := db.NewIterator(nil, nil)
	defer it.Release()
	return !it.First(), it.Error()
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

// lookup returns the value a key has in the overlay, or else nothing if
// the filter of the keys says the store does not hold the key, or else the
// one LevelDB had when it was last read or written (recent), if it has one
// there, and the count of writes to pass to remember. During the restore
// it writes the restored records first.
func (s *store) lookup(key string) (value []byte, found bool, gen uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.recovered.Load() {
		return nil, false, 0, s.writeRestored()
	}
	if e := s.overlay[key]; e != nil {
		return e.value, true, 0, nil
	}
	if s.keys != nil && !s.keys.mayHave(key) {
		return nil, true, 0, nil
	}
	value, found = s.recent.get(key)
	return value, found, s.gen, nil
}

// remember keeps what LevelDB had for key (nil: nothing) after the restore,
// unless a callback wrote since the lookup that came before the read (gen):
// the read may then have found LevelDB before or after that write reached
// it, and only the writer knows which value is the newer.
func (s *store) remember(key string, value []byte, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recovered.Load() && s.gen == gen { // closed: the budget is 0
		s.recent.put(key, value)
	}
}

func (s *store) Has(key string) (bool, error) {
	v, err := s.Get(key)
	return v != nil, err
}

func (s *store) Get(key string) ([]byte, error) {
	if s.db == nil {
		return nil, errNotOpen
	}
	v, found, gen, err := s.lookup(key)
	if found || err != nil {
		return v, err
	}
	v, err = s.db.Get([]byte(key), nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		v, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("localstore: get %q in %s: %w", key, s.path, err)
	}
	s.remember(key, v, gen)
	return v, nil
}

func (s *store) Set(key string, value []byte) error {
	if value == nil {
		value = []byte{} // nil means deleted
	}
	return s.write(key, value)
}

func (s *store) Delete(key string) error {
	return s.write(key, nil)
}

// write restores a record (before MarkRecovered) or keeps a callback's write
// in the overlay until the changelog acknowledges it.
func (s *store) write(key string, value []byte) error {
	if s.db == nil {
		return errNotOpen
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.recovered.Load() {
		return s.restore(key, value)
	}
	if s.werr != nil {
		return s.werr
	}
	s.gen++ // the overlay shadows the key's kept value until the writer replaces it
	e := s.overlay[key]
	if e == nil {
		if len(s.overlay) >= maxUnacked {
			return fmt.Errorf("localstore: %d keys written in %s wait for the changelog's acknowledgement (is the processor's producer built by Stores.Producer?)", len(s.overlay), s.path)
		}
		e = new(entry)
		s.overlay[key] = e
	}
	if value != nil {
		s.addKey(key)
	}
	e.value = value
	e.inflight++
	return nil
}

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
	for it.Next() {
		k := it.Key()
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

// isInternal says whether a LevelDB key is the store's own (the offset, a
// mark), not a table key.
func isInternal(k []byte) bool {
	return string(k) == OffsetKey || (len(k) >= len(MarkPrefix) && string(k[:len(MarkPrefix)]) == MarkPrefix)
}

// restore applies a restored record (a delete if value is nil), from
// Goka's restore or the store's own reading of its changelog
// (changelog.go), and writes the batch when it is full. Called with mu
// held; the caller sets the offset.
func (s *store) restore(key string, value []byte) error {
	s.restored++
	s.stores.restored.Add(1)
	s.unwritten++
	switch {
	case s.keys == nil:
		s.put(s.batch, key, value)
	case value != nil:
		s.keys.add(key)
		s.put(s.batch, key, value)
	case s.keys.mayHave(key):
		s.put(s.batch, key, nil)
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

// put adds a write of key (a delete if value is nil) to b, and its mark's.
func (s *store) put(b *leveldb.Batch, key string, value []byte) {
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
	s.unwritten, s.storedOffset = 0, s.offset
	return nil
}

// acked is called by the producer when the changelog acknowledged a write.
func (s *store) acked(key string, value []byte, offset int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.recovered.Load() {
		return
	}
	if e := s.overlay[key]; e == nil || e.inflight == 0 {
		s.log.Warn("changelog acknowledged a write the store did not make; ignored", "key", key, "offset", offset)
		return
	}
	s.acks = append(s.acks, ack{key: key, value: value, offset: offset})
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// writer writes acknowledged writes to LevelDB, each time all that waits in
// one batch with the offset reached, until Close.
func (s *store) writer() {
	defer close(s.written)
	var spare []ack
	b := new(leveldb.Batch)
	for {
		select {
		case <-s.kick:
		case <-s.stop:
			s.writeAcked(b, spare)
			return
		}
		spare = s.writeAcked(b, spare)
	}
}

// writeAcked writes the acknowledged writes waiting, then drops them from the
// overlay (only then: a read finds a key in the overlay or in LevelDB). It
// returns a slice to collect the next ones in.
func (s *store) writeAcked(b *leveldb.Batch, spare []ack) []ack {
	s.mu.Lock()
	acks := s.acks
	s.acks = spare[:0]
	offset := s.offset
	stamp := s.restoreStamp // an unchecked restore: not caught up now
	if s.complete {
		stamp = s.stores.now()
	}
	s.mu.Unlock()
	if len(acks) == 0 {
		return acks
	}
	b.Reset()
	for _, a := range acks {
		s.put(b, a.key, a.value)
		offset = max(offset, a.offset)
	}
	s.putOffset(b, offset, stamp)
	err := s.db.Write(b, nil)

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.werr == nil {
			s.werr = fmt.Errorf("localstore: write acknowledged records in %s: %w", s.path, err)
			s.log.Error("local store failed; it takes no more writes", "err", err)
		}
		return acks // the overlay keeps them
	}
	s.offset = offset
	s.wrote.Broadcast()
	for _, a := range acks {
		s.recent.put(a.key, a.value) // in order: a key's last write is kept
		if e := s.overlay[a.key]; e != nil {
			if e.inflight--; e.inflight <= 0 {
				delete(s.overlay, a.key)
			}
		}
	}
	clear(acks)
	return acks
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

func (s *store) Iterator() (storage.Iterator, error) {
	return s.IteratorWithRange(nil, nil)
}

// IteratorWithRange iterates over a snapshot of the table: LevelDB merged
// with the overlay.
func (s *store) IteratorWithRange(start, limit []byte) (storage.Iterator, error) {
	if s.db == nil {
		return nil, errNotOpen
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.recovered.Load() {
		if err := s.writeRestored(); err != nil {
			return nil, err
		}
	}
	var r *util.Range
	if start != nil || limit != nil {
		r = &util.Range{Start: start, Limit: limit}
	}
	// Both under mu: the writer drops a key from the overlay only after
	// LevelDB has it, so each key is in one of the two snapshots.
	it := &mergedIterator{db: s.db.NewIterator(r, nil), dbStale: true}
	for k, e := range s.overlay {
		if (start == nil || k >= string(start)) && (limit == nil || k < string(limit)) {
			it.over = append(it.over, kv{k, e.value})
		}
	}
	it.sortOverlay()
	return it, nil
}

// levelOptions size LevelDB for many small stores in one process (one per
// table partition): 2 MiB memtables and block caches instead of LevelDB's
// 4 and 8 MiB. With 1,000,000 pending follow-ups on 8 partitions this took
// the process from 605 to 359 MB RSS; 1 MiB memtables saved 60 MB more but
// doubled the p99 lateness (compactions). Read buffers are pooled: without
// the pool every block read past the cache (about one per fire with 1 M
// pending) allocated 4 KiB, a third of the process's garbage, and applying
// commands ran at 28 k/s instead of 37 k/s. Tables carry bloom filters (10
// bits per key), so reading a key that is not there skips the tables.
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
var levelOptions = &opt.Options{
	Filter:                 filter.NewBloomFilter(10),
	WriteBuffer:            2 << 20,
	BlockCacheCapacity:     2 << 20,
	DisableSeeksCompaction: true,
	CompactionL0Trigger:    2,
}
