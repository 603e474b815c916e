package localstore

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/syndtr/goleveldb/leveldb"
	lvlstorage "github.com/syndtr/goleveldb/leveldb/storage"
	"github.com/syndtr/goleveldb/leveldb/util"
)

// countingFiles counts what LevelDB reads from its table files.
type countingFiles struct {
	lvlstorage.Storage
	reads, bytes atomic.Int64
}

func (c *countingFiles) Open(fd lvlstorage.FileDesc) (lvlstorage.Reader, error) {
	r, err := c.Storage.Open(fd)
	if err != nil || fd.Type != lvlstorage.TypeTable {
		return r, err
	}
	return &countingReader{Reader: r, files: c}, nil
}

type countingReader struct {
	lvlstorage.Reader
	files *countingFiles
}

func (r *countingReader) ReadAt(p []byte, off int64) (int, error) {
	r.files.reads.Add(1)
	r.files.bytes.Add(int64(len(p)))
	return r.Reader.ReadAt(p, off)
}

// reset starts the counts again.
func (c *countingFiles) reset() {
	c.reads.Store(0)
	c.bytes.Store(0)
}

// levelStore is a LevelDB opened with the stores' options over counted
// files, holding users values of about 200 bytes written in random order,
// with two index keys each (as the scheduler's table holds them), all
// compacted below the memtable.
func levelStore(tb testing.TB, users int) (*leveldb.DB, *countingFiles) {
	tb.Helper()
	files, err := lvlstorage.OpenFile(tb.TempDir(), false)
	if err != nil {
		tb.Fatal(err)
	}
	counted := &countingFiles{Storage: files}
	db, err := leveldb.Open(counted, levelOptions)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := db.Close(); err != nil {
			tb.Error(err)
		}
		if err := files.Close(); err != nil {
			tb.Error(err)
		}
	})
	rng := rand.New(rand.NewPCG(1, 2))
	batch := new(leveldb.Batch)
	for n, u := range rng.Perm(users) {
		putUser(batch, rng, u)
		if n%100 == 99 || n == users-1 {
			if err := db.Write(batch, nil); err != nil {
				tb.Fatal(err)
			}
			batch.Reset()
		}
	}
	if err := db.CompactRange(util.Range{}); err != nil {
		tb.Fatal(err)
	}
	return db, counted
}

func userKey(u int) []byte { return fmt.Appendf(nil, "user-%d", u) }

// putUser adds user u's value (two follow-ups, about 200 bytes) and its
// two due keys to batch, as the scheduler's table holds them.
func putUser(batch *leveldb.Batch, rng *rand.Rand, u int) {
	value := make([]byte, 0, 200)
	for range 2 {
		value = binary.AppendUvarint(value, rng.Uint64())
		value = fmt.Appendf(value, "p-%d/%s", rng.IntN(1e8), "a follow-up's payload of sixty-four bytes, the same for each one")
	}
	batch.Put(userKey(u), value)
	for range 2 {
		key := binary.BigEndian.AppendUint64([]byte(IndexPrefix), rng.Uint64())
		batch.Put(fmt.Appendf(key, "user-%d/p-%d", u, rng.IntN(1e8)), make([]byte, 16))
	}
}

// TestReadPastTheMemtableReadsOneBlock pins what the stores' options rely
// on in goleveldb (levelOptions): with the block cache off, each open
// table keeps its index and bloom filter in memory, so a read of a key
// below the memtable reads the one data block that holds it and nothing
// else, however many tables the store has. An upgrade that read the
// index or the filter from the file again would make every fire's read
// of a pending user's value several reads (as a block cache too small for
// the store's indexes did: BenchmarkGetPastTheMemtable).
func TestReadPastTheMemtableReadsOneBlock(t *testing.T) {
	const users = 350000
	db, counted := levelStore(t, users)
	var stats leveldb.DBStats
	if err := db.Stats(&stats); err != nil {
		t.Fatal(err)
	}
	tables := 0
	for _, n := range stats.LevelTablesCounts {
		tables += n
	}
	if tables < 8 {
		t.Fatalf("the store has %d tables; the test needs several (levels %v)", tables, stats.LevelTablesCounts)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for u := range users { // opens every table
		if _, err := db.Get(userKey(u), nil); err != nil {
			t.Fatalf("get user %d: %v", u, err)
		}
	}
	counted.reset()
	const gets = 20000
	for range gets {
		if _, err := db.Get(userKey(rng.IntN(users)), nil); err != nil {
			t.Fatal(err)
		}
	}
	reads, bytes := counted.reads.Load(), counted.bytes.Load()
	t.Logf("%d tables (levels %v): %.3f file reads and %.0f bytes per get", tables, stats.LevelTablesCounts, float64(reads)/gets, float64(bytes)/gets)
	if reads > gets*101/100 {
		t.Errorf("%d file reads for %d gets of keys below the memtable: more than one a get (index or filter blocks read again?)", reads, gets)
	}
	if bytes > gets*6<<10 {
		t.Errorf("%d bytes read for %d gets: more than a 4 KiB data block a get", bytes, gets)
	}
}

// BenchmarkGetPastTheMemtable measures a read of a user's value written
// long before (a fire's read of a follow-up scheduled hours ago, or a
// command's of a user already pending), with the stores' options and one
// partition's share of 10 M pending (of 8), and the file reads it takes:
// "reads" reads only; "writes" also writes a user's new value per read,
// so that memtables flush and compactions run beside the reads, as they
// do while the scheduler fires.
func BenchmarkGetPastTheMemtable(b *testing.B) {
	const users = 625000
	for _, writes := range []bool{false, true} {
		b.Run(map[bool]string{false: "reads", true: "writes"}[writes], func(b *testing.B) {
			db, counted := levelStore(b, users)
			rng := rand.New(rand.NewPCG(5, 6))
			for range users / 2 {
				if _, err := db.Get(userKey(rng.IntN(users)), nil); err != nil {
					b.Fatal(err)
				}
			}
			counted.reset()
			value, batch := make([]byte, 200), new(leveldb.Batch)
			b.ResetTimer()
			for b.Loop() {
				if _, err := db.Get(userKey(rng.IntN(users)), nil); err != nil {
					b.Fatal(err)
				}
				if !writes {
					continue
				}
				binary.BigEndian.PutUint64(value, rng.Uint64())
				batch.Put(userKey(rng.IntN(users)), value)
				if batch.Len() == 100 {
					if err := db.Write(batch, nil); err != nil {
						b.Fatal(err)
					}
					batch.Reset()
				}
			}
			b.ReportMetric(float64(counted.reads.Load())/float64(b.N), "reads/op")
			b.ReportMetric(float64(counted.bytes.Load())/float64(b.N), "read-B/op")
		})
	}
}

// TestOpenTablesHoldOnlyTheirIndexes pins the other half of what the
// stores' options rely on in goleveldb: the memory a store holds for its
// open tables is their index and filter blocks, about a tenth of the
// tables, not more. goleveldb's buffer pool hands a request for a block
// larger than 16 KiB (a table's index or filter) whatever large buffer it
// holds, and a compaction puts back its table writer's buffer of 2 MiB:
// with the pool on, a table opened after a compaction kept that whole
// buffer for its index as long as it stayed open (with 30 M pending, 600
// MB of the heap). The writes here are interleaved with reads of users
// written before, as a scheduler's commands and fires interleave them.
func TestOpenTablesHoldOnlyTheirIndexes(t *testing.T) {
	const users = 600000
	files, err := lvlstorage.OpenFile(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	db, err := leveldb.Open(files, levelOptions)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			db.Close()
		}
	}()
	rng := rand.New(rand.NewPCG(7, 8))
	batch := new(leveldb.Batch)
	for n := range users {
		putUser(batch, rng, n)
		if n%100 == 99 {
			if err := db.Write(batch, nil); err != nil {
				t.Fatal(err)
			}
			batch.Reset()
			for range 5 { // a command's or a fire's read of a user written before
				if _, err := db.Get(userKey(rng.IntN(n+1)), nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for u := range users { // opens every table
		if _, err := db.Get(userKey(u), nil); err != nil {
			t.Fatalf("get user %d: %v", u, err)
		}
	}
	var stats leveldb.DBStats
	if err := db.Stats(&stats); err != nil {
		t.Fatal(err)
	}
	var tables int
	var tableBytes int64
	for i, n := range stats.LevelTablesCounts {
		tables += n
		tableBytes += stats.LevelSizes[i]
	}
	open := liveHeap()
	closed = true
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	held := open - liveHeap()
	t.Logf("%d tables (levels %v, %d open), %.1f MiB: the open store held %.1f MiB of heap (%.1f %% of its tables)",
		tables, stats.LevelTablesCounts, stats.OpenedTablesCount, float64(tableBytes)/(1<<20), float64(held)/(1<<20), 100*float64(held)/float64(tableBytes))
	if tables < 8 {
		t.Fatalf("the store has %d tables; the test needs several", tables)
	}
	// The memtables (up to two of WriteBuffer) and a tenth of the tables.
	if limit := 2*int64(levelOptions.WriteBuffer) + tableBytes/10; held > limit {
		t.Errorf("the open store held %d bytes of heap, more than %d (two memtables and a tenth of its %d bytes of tables): open tables keep more than their index and filter blocks", held, limit, tableBytes)
	}
}

// liveHeap is the heap in use after two collections (the second frees
// what sync.Pools held through the first).
func liveHeap() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
