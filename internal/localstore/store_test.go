package localstore

import (
	"bytes"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/syndtr/goleveldb/leveldb"
)

// logBuffer collects log output from several goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fakeProducer records emits; the test acknowledges them.
type fakeProducer struct {
	mu     sync.Mutex
	emits  []emitted
	closed bool
}

type emitted struct {
	topic, key string
	value      []byte
	finish     goka.PromiseFinisher
}

func (f *fakeProducer) Emit(topic, key string, value []byte) *goka.Promise {
	return f.EmitWithHeaders(topic, key, value, nil)
}

func (f *fakeProducer) EmitWithHeaders(topic, key string, value []byte, _ goka.Headers) *goka.Promise {
	p, fin := goka.NewPromiseWithFinisher()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.emits = append(f.emits, emitted{topic, key, value, fin})
	return p
}

func (f *fakeProducer) Close() error { f.closed = true; return nil }

// ack acknowledges emit i as written at partition/offset.
func (f *fakeProducer) ack(i int, partition int32, offset int64) {
	f.mu.Lock()
	e := f.emits[i]
	f.mu.Unlock()
	e.finish(&sarama.ProducerMessage{Topic: e.topic, Key: sarama.StringEncoder(e.key), Partition: partition, Offset: offset}, nil)
}

func (f *fakeProducer) fail(i int) {
	f.mu.Lock()
	e := f.emits[i]
	f.mu.Unlock()
	e.finish(nil, fmt.Errorf("broker says no"))
}

// fixture is a Stores with a wrapped fake producer, as a processor has them.
type fixture struct {
	stores *Stores
	build  storage.Builder
	fake   *fakeProducer
	prod   goka.Producer

	mu  sync.Mutex
	hwm map[string]int64 // the changelogs' ends by "topic/partition" (absent: not known)
}

// changelogEnds makes the stores' changelog of topic's partition end at
// hwm (its first record at 0) from the next open.
func (f *fixture) changelogEnds(topic string, partition int32, hwm int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hwm[fmt.Sprint(topic, "/", partition)] = hwm
}

func (f *fixture) end(topic string, partition int32) (changelogEnd, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hwm, ok := f.hwm[fmt.Sprint(topic, "/", partition)]
	if !ok {
		return unknownEnd, errNoKafka
	}
	return changelogEnd{oldest: 0, hwm: hwm, at: f.stores.now()}, nil
}

func newFixture(t *testing.T, dir string, log *slog.Logger) *fixture {
	t.Helper()
	f := &fixture{stores: New(dir, log), fake: new(fakeProducer), hwm: map[string]int64{}}
	f.stores.readEnd = f.end
	f.build = f.stores.Builder()
	prod, err := f.stores.Producer(func([]string, string, func() hash.Hash32) (goka.Producer, error) {
		return f.fake, nil
	})(nil, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	f.prod = prod
	return f
}

func (f *fixture) open(t *testing.T, topic string, partition int32) storage.Storage {
	t.Helper()
	st, err := f.build(topic, partition)
	if err != nil {
		t.Fatalf("builder(%s, %d): %v", topic, partition, err)
	}
	if err := st.Open(); err != nil {
		t.Fatalf("Open(%s, %d): %v", topic, partition, err)
	}
	return st
}

// set does what Goka does for ctx.SetValue: the store first, then the
// changelog. It returns the emit's index for ack.
func (f *fixture) set(t *testing.T, st storage.Storage, topic, key, value string) int {
	t.Helper()
	if err := st.Set(key, []byte(value)); err != nil {
		t.Fatalf("Set(%s): %v", key, err)
	}
	f.prod.EmitWithHeaders(topic, key, []byte(value), nil)
	return len(f.fake.emits) - 1
}

func (f *fixture) del(t *testing.T, st storage.Storage, topic, key string) int {
	t.Helper()
	if err := st.Delete(key); err != nil {
		t.Fatalf("Delete(%s): %v", key, err)
	}
	f.prod.EmitWithHeaders(topic, key, nil, nil)
	return len(f.fake.emits) - 1
}

// restore does what Goka's recovery does: a write and its offset per record,
// then MarkRecovered.
func restore(t *testing.T, st storage.Storage, first int64, kv ...string) {
	t.Helper()
	partial(t, st, first, kv...)
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
}

// waitOffset waits until the store's writer has written up to offset.
func waitOffset(t *testing.T, st storage.Storage, offset int64) {
	t.Helper()
	s := st.(*store)
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.offset < offset {
		s.wrote.Wait()
	}
}

func mustGet(t *testing.T, st storage.Storage, key string) string {
	t.Helper()
	v, err := st.Get(key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	if v == nil {
		return "<nil>"
	}
	return string(v)
}

func mustOffset(t *testing.T, st storage.Storage) int64 {
	t.Helper()
	off, err := st.GetOffset(-2)
	if err != nil {
		t.Fatal(err)
	}
	return off
}

func mustClose(t *testing.T, st storage.Storage) {
	t.Helper()
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func keys(t *testing.T, it storage.Iterator) []string {
	t.Helper()
	defer it.Release()
	var out []string
	for it.Next() {
		v, err := it.Value()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(it.Key())+"="+string(v))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestBuilderDoesNotTouchDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	st, err := New(dir, newLogger(io.Discard)).Builder()("table", 0)
	if err != nil {
		t.Fatalf("builder: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("builder created %s (stat err %v); it must only allocate", dir, err)
	}
	// goka calls Close after a failed or skipped Open: it must be a no-op.
	if err := st.Close(); err != nil {
		t.Fatalf("Close before Open: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Close before Open created %s (stat err %v)", dir, err)
	}
	if _, err := st.Get("k"); err == nil {
		t.Fatal("Get before Open succeeded, want error")
	}
	if _, err := New(dir, nil).Builder()("a/b", 0); err == nil {
		t.Fatal("builder accepted a topic with a path separator")
	}
}

const (
	crashDirEnv = "LOCALSTORE_CRASH_DIR"
	crashReady  = "localstore-crash-helper: wrote state, killing myself"
)

// TestCrashHelper runs only as the child process of TestKillKeepsAcknowledged:
// it restores, writes (one write acknowledged, one not) and kills itself with
// SIGKILL without closing.
func TestCrashHelper(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process for TestKillKeepsAcknowledged")
	}
	f := newFixture(t, dir, newLogger(os.Stderr))
	st := f.open(t, "table", 0)
	restore(t, st, 0, "a", "a0", "b", "b0", "c", "c0")
	f.fake.ack(f.set(t, st, "table", "a", "a1"), 0, 3)
	f.set(t, st, "table", "b", "b1") // the changelog never acknowledged it
	waitOffset(t, st, 3)
	if _, err := os.Stdout.WriteString(crashReady + "\n"); err != nil {
		t.Fatal(err)
	}
	p, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil { // SIGKILL on Unix
		t.Fatal(err)
	}
	select {} // wait for the signal; never returns
}

// After a kill -9 the store holds exactly what the changelog acknowledged,
// and Goka restores only the tail after its offset.
func TestKillKeepsAcknowledged(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if !strings.Contains(stdout.String(), crashReady) {
		t.Fatalf("helper did not write its state (err %v)\nstdout:\n%s\nstderr:\n%s", err, &stdout, &stderr)
	}
	if err == nil || cmd.ProcessState.Success() {
		t.Fatalf("helper exited normally, want killed\nstdout:\n%s", &stdout)
	}
	t.Logf("helper terminated: %v", cmd.ProcessState)

	var logs logBuffer
	st := newFixture(t, dir, newLogger(&logs)).open(t, "table", 0)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != 3 {
		t.Errorf("GetOffset = %d after the kill, want 3 (restore the tail after it)", off)
	}
	for k, want := range map[string]string{"a": "a1", "b": "b0", "c": "c0"} {
		if got := mustGet(t, st, k); got != want {
			t.Errorf("Get(%s) = %s after the kill, want %s", k, got, want)
		}
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("reopening after a kill warned:\n%s", logs.String())
	}
}

// A store an older version wrote (values, no offset key) is wiped.
func TestOlderStoreIsWiped(t *testing.T) {
	dir := t.TempDir()
	db, err := leveldb.OpenFile(filepath.Join(dir, "table.0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"__offset": "17", "k": "v"} {
		if err := db.Put([]byte(k), []byte(v), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	st := newFixture(t, dir, newLogger(&logs)).open(t, "table", 0)
	defer mustClose(t, st)
	if got := mustGet(t, st, "k"); got != "<nil>" {
		t.Errorf("Get(k) = %s, want it wiped", got)
	}
	if off := mustOffset(t, st); off != -2 {
		t.Errorf("GetOffset = %d, want -2 (restore from the start)", off)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "older version") || !strings.Contains(l, "partition=0") {
		t.Errorf("no warning naming the partition:\n%s", l)
	}
}

// partial restores records from offset first on, as Goka does, and stops
// before the end (no MarkRecovered).
func partial(t *testing.T, st storage.Storage, first int64, kv ...string) {
	t.Helper()
	for i := 0; i < len(kv); i += 2 {
		if err := st.Set(kv[i], []byte(kv[i+1])); err != nil {
			t.Fatal(err)
		}
		if err := st.SetOffset(first + int64(i/2)); err != nil {
			t.Fatal(err)
		}
	}
}

// A store whose LevelDB cannot be opened as it is is wiped.
func TestCorruptStoreIsWiped(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	st := f.open(t, "table", 0)
	restore(t, st, 0, "k", "v")
	mustClose(t, st)
	manifests, err := filepath.Glob(filepath.Join(dir, "table.0", "MANIFEST-*"))
	if err != nil || len(manifests) == 0 {
		t.Fatalf("no manifest (%v)", err)
	}
	for _, m := range manifests {
		if err := os.WriteFile(m, []byte("garbage, not a manifest"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var logs logBuffer
	st = newFixture(t, dir, newLogger(&logs)).open(t, "table", 0)
	defer mustClose(t, st)
	if got := mustGet(t, st, "k"); got != "<nil>" {
		t.Errorf("Get(k) = %s, want it wiped", got)
	}
	if !strings.Contains(logs.String(), "corrupt") {
		t.Errorf("no warning about the corrupt store:\n%s", logs.String())
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	pdir := filepath.Join(dir, "table.1")
	first := f.open(t, "table", 1)
	restore(t, first, 0, "k", "v")

	second, err := f.build("table", 1)
	if err != nil {
		t.Fatal(err)
	}
	err = second.Open()
	if err == nil {
		second.Close()
		t.Fatal("second Open of a locked directory succeeded")
	}
	t.Logf("second Open: %v", err)
	if !strings.Contains(err.Error(), pdir) || !strings.Contains(err.Error(), "locked") {
		t.Errorf("error %q does not say that %s is locked", err, pdir)
	}
	// goka calls Close after a failed Open: a no-op, and the live store
	// still gets its acknowledgements.
	if err := second.Close(); err != nil {
		t.Errorf("Close after failed Open: %v", err)
	}
	if err := first.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	f.fake.ack(f.set(t, first, "table", "k", "v2"), 1, 5)
	waitOffset(t, first, 5)
	mustClose(t, first)
	st := f.open(t, "table", 1)
	defer mustClose(t, st)
	if got := mustGet(t, st, "k"); got != "v2" {
		t.Errorf("Get(k) = %s after reopen, want v2", got)
	}
}

func TestSeparateDirectories(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	type tp struct {
		topic     string
		partition int32
	}
	parts := []tp{{"t1", 0}, {"t1", 1}, {"t2", 0}}
	stores := make([]storage.Storage, len(parts))
	for i, p := range parts {
		stores[i] = f.open(t, p.topic, p.partition)
		restore(t, stores[i], int64(100+i), "k", fmt.Sprint(p))
	}
	for _, st := range stores {
		mustClose(t, st)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"t1.0", "t1.1", "t2.0"}; !slices.Equal(names, want) {
		t.Fatalf("directories %v, want %v", names, want)
	}
	for i, p := range parts {
		st := f.open(t, p.topic, p.partition)
		if got := mustGet(t, st, "k"); got != fmt.Sprint(p) {
			t.Errorf("%v: Get(k) = %s", p, got)
		}
		if off := mustOffset(t, st); off != int64(100+i) {
			t.Errorf("%v: GetOffset = %d, want %d", p, off, 100+i)
		}
		mustClose(t, st)
	}
}

func marked(t *testing.T, st storage.Storage) []string {
	t.Helper()
	ks, err := st.(*store).Marked()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ks)
	return ks
}

// levelZeroTables reports how many tables level 0 holds and how many
// memtables were flushed so far.
func levelZeroTables(t *testing.T, st storage.Storage) (tables int, flushed uint32) {
	t.Helper()
	stats := dbStats(t, st)
	if len(stats.LevelTablesCounts) > 0 {
		tables = stats.LevelTablesCounts[0]
	}
	return tables, stats.MemComp
}

// Level 0 is compacted at two tables (levelOptions): after each memtable
// flush it settles at one table at most, so a read past the memtables
// looks in one level-0 table before level 1, not in the three that
// LevelDB's trigger of four leaves after an intake (with the compactions
// by seeks off, nothing else merges them).
func TestLevelZeroSettlesAtOneTable(t *testing.T) {
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	st := f.open(t, "table", 0)
	defer mustClose(t, st)
	value := strings.Repeat("v", 100)
	next := 0
	for want := uint32(1); want <= 3; want++ {
		for _, flushed := levelZeroTables(t, st); flushed < want; _, flushed = levelZeroTables(t, st) {
			batch := make([]rec, restoreBatch)
			for i := range batch {
				batch[i] = val(fmt.Sprintf("user-%08d", ((next+i)*7919)%1000003), value)
			}
			restoreRecs(t, st, int64(next), batch...)
			next += len(batch)
		}
		deadline := time.Now().Add(10 * time.Second)
		for tables, _ := levelZeroTables(t, st); tables > 1; tables, _ = levelZeroTables(t, st) {
			if time.Now().After(deadline) {
				t.Fatalf("after memtable flush %d (%d records) level 0 still holds %d tables 10 s later, want at most 1", want, next, tables)
			}
			time.Sleep(10 * time.Millisecond) // LevelDB's compaction has no event to await
		}
	}
}
