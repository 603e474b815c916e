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
	"github.com/ivrsched/ivrsched/internal/clock"
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

// The restored records and the offset Goka reached survive a close, and a
// second close does nothing.
func TestRestoreSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	var logs logBuffer
	f := newFixture(t, dir, newLogger(&logs))
	st := f.open(t, "table", 3)
	if off := mustOffset(t, st); off != -2 {
		t.Fatalf("new store: GetOffset(-2) = %d, want -2 (restore from the start)", off)
	}
	restore(t, st, 40, "a", "1", "b", "2", "c", "3")
	if n := f.stores.Restored(); n != 3 {
		t.Errorf("Restored() = %d after restoring 3 records, want 3", n)
	}
	mustClose(t, st)
	mustClose(t, st)

	st = f.open(t, "table", 3)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != 42 {
		t.Errorf("GetOffset = %d after reopen, want 42", off)
	}
	if err := st.MarkRecovered(); err != nil { // Goka: nothing left to restore
		t.Fatal(err)
	}
	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(t, it), []string{"a=1", "b=2", "c=3"}; !slices.Equal(got, want) {
		t.Errorf("iterated %v, want %v (without the offset key)", got, want)
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("clean cycle logged a warning:\n%s", logs.String())
	}
}

// A callback's write is read back at once but reaches LevelDB only with its
// acknowledgement, with the offset the changelog gave it.
func TestWritesReachDiskWhenAcknowledged(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	st := f.open(t, "table", 0)
	restore(t, st, 0, "a", "a0", "b", "b0", "c", "c0")

	ea := f.set(t, st, "table", "a", "a1")
	eb := f.set(t, st, "table", "b", "b1")
	ec := f.del(t, st, "table", "c")
	f.set(t, st, "table", "d", "d1") // never acknowledged
	for k, want := range map[string]string{"a": "a1", "b": "b1", "c": "<nil>", "d": "d1"} {
		if got := mustGet(t, st, k); got != want {
			t.Errorf("Get(%s) = %s before any acknowledgement, want %s", k, got, want)
		}
	}
	if ok, err := st.Has("c"); err != nil || ok {
		t.Errorf("Has(c) = %v, %v after its delete; want false", ok, err)
	}
	f.fake.ack(ea, 0, 10)
	f.fake.ack(eb, 0, 11)
	f.fake.ack(ec, 0, 12)
	waitOffset(t, st, 12)
	if got := mustGet(t, st, "a"); got != "a1" {
		t.Errorf("Get(a) = %s after its acknowledgement, want a1", got)
	}
	mustClose(t, st)

	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != 12 {
		t.Errorf("GetOffset = %d, want 12 (the last acknowledged write)", off)
	}
	for k, want := range map[string]string{"a": "a1", "b": "b1", "c": "<nil>", "d": "<nil>"} {
		if got := mustGet(t, st, k); got != want {
			t.Errorf("after reopen Get(%s) = %s, want %s", k, got, want)
		}
	}
}

// Two writes of a key in flight: the first acknowledgement writes the first
// value to disk, reads still see the second.
func TestSameKeyInFlightTwice(t *testing.T) {
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	st := f.open(t, "table", 0)
	defer mustClose(t, st)
	restore(t, st, 0)
	e1 := f.set(t, st, "table", "k", "v1")
	e2 := f.set(t, st, "table", "k", "v2")
	f.fake.ack(e1, 0, 5)
	waitOffset(t, st, 5)
	if got := mustGet(t, st, "k"); got != "v2" {
		t.Fatalf("Get(k) = %s with v2 unacknowledged, want v2", got)
	}
	if v, err := st.(*store).db.Get([]byte("k"), nil); err != nil || string(v) != "v1" {
		t.Fatalf("LevelDB holds %q, %v; want v1 (what the changelog has)", v, err)
	}
	f.fake.ack(e2, 0, 6)
	waitOffset(t, st, 6)
	if n := len(st.(*store).overlay); n != 0 {
		t.Errorf("overlay holds %d keys after every write was acknowledged, want 0", n)
	}
	if got := mustGet(t, st, "k"); got != "v2" {
		t.Errorf("Get(k) = %s, want v2", got)
	}
}

// Acknowledgements go to the store open when the write was emitted: not to
// a store of another topic or partition, not to a later store of the same
// partition, not to a closed one.
func TestAcknowledgementsReachTheirStore(t *testing.T) {
	dir := t.TempDir()
	var logs logBuffer
	f := newFixture(t, dir, newLogger(&logs))
	p0 := f.open(t, "table", 0)
	p1 := f.open(t, "table", 1)
	restore(t, p0, 0)
	restore(t, p1, 0)

	e0 := f.set(t, p0, "table", "k0", "v0")
	e1 := f.set(t, p1, "table", "k1", "v1")
	other := len(f.fake.emits)
	f.prod.Emit("calls", "k0", []byte("not a table write"))
	f.fake.ack(other, 0, 99)
	f.fake.ack(e1, 1, 7)
	f.fake.ack(e0, 0, 3)
	waitOffset(t, p0, 3)
	waitOffset(t, p1, 7)
	if off := mustOffset(t, p0); off != 3 {
		t.Errorf("partition 0 offset %d, want 3 (the calls topic's ack must not count)", off)
	}

	late := f.set(t, p0, "table", "k0", "late")
	mustClose(t, p0)
	p0 = f.open(t, "table", 0)
	defer mustClose(t, p0)
	if err := p0.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	f.fake.ack(late, 0, 4) // emitted by the store closed since
	if got := mustGet(t, p0, "k0"); got != "v0" {
		t.Errorf("Get(k0) = %s: the new store took the old one's acknowledgement", got)
	}
	mustClose(t, p1)
	f.fake.ack(len(f.fake.emits)-1, 1, 8) // nothing open: ignored
	if strings.Contains(logs.String(), "did not make") {
		t.Errorf("an acknowledgement reached the wrong store:\n%s", logs.String())
	}
}

// A failed changelog write never reaches the disk; the read still sees it
// until the store closes (the processor fails on the error).
func TestFailedWriteStaysOffDisk(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	st := f.open(t, "table", 0)
	restore(t, st, 0, "k", "old")
	f.fake.fail(f.set(t, st, "table", "k", "new"))
	mustClose(t, st)
	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	if got := mustGet(t, st, "k"); got != "old" {
		t.Errorf("Get(k) = %s after a failed changelog write, want old", got)
	}
}

func TestUnwrappedProducerIsReported(t *testing.T) {
	defer func(n int) { maxUnacked = n }(maxUnacked)
	maxUnacked = 3
	st := newFixture(t, t.TempDir(), newLogger(io.Discard)).open(t, "table", 0)
	defer mustClose(t, st)
	restore(t, st, 0)
	var err error
	for i := 0; i < 4 && err == nil; i++ {
		err = st.Set(fmt.Sprint("k", i), []byte("v"))
	}
	if err == nil || !strings.Contains(err.Error(), "Stores.Producer") {
		t.Fatalf("4 writes never acknowledged, limit 3: err %v, want one naming Stores.Producer", err)
	}
}

// The iterator shows LevelDB with the overlay over it, in key order,
// within the range asked for.
func TestIteratorMergesOverlay(t *testing.T) {
	f := newFixture(t, t.TempDir(), newLogger(io.Discard))
	st := f.open(t, "table", 0)
	defer mustClose(t, st)
	restore(t, st, 0, "b", "b0", "d", "d0", "f", "f0", "h", "h0")
	f.set(t, st, "table", "a", "a1") // before all
	f.set(t, st, "table", "d", "d1") // replaces
	f.del(t, st, "table", "f")       // hides
	f.set(t, st, "table", "g", "g1") // between
	f.del(t, st, "table", "x")       // deletes nothing
	f.set(t, st, "table", "z", "z1") // after all

	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a=a1", "b=b0", "d=d1", "g=g1", "h=h0", "z=z1"}
	if got := keys(t, it); !slices.Equal(got, want) {
		t.Errorf("iterated %v, want %v", got, want)
	}
	it, err = st.IteratorWithRange([]byte("b"), []byte("h"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(t, it), []string{"b=b0", "d=d1", "g=g1"}; !slices.Equal(got, want) {
		t.Errorf("range [b, h): %v, want %v", got, want)
	}
	it, err = st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	if !it.Seek([]byte("e")) {
		t.Fatal("Seek(e) found nothing")
	}
	if got, want := keys(t, it), []string{"g=g1", "h=h0", "z=z1"}; !slices.Equal(got, want) {
		t.Errorf("after Seek(e): %v, want %v", got, want)
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

// A store last caught up with its changelog longer ago than MaxOffline is
// wiped: tombstones written after its offset may have been compacted away
// since (delete.retention.ms), and reused it would bring deleted keys back.
// A clean close stamps the store as caught up; a store stamped within
// MaxOffline is reused.
func TestStoreOfflineTooLongIsWiped(t *testing.T) {
	dir := t.TempDir()
	var logs logBuffer
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	f := newFixture(t, dir, newLogger(&logs))
	f.stores.Clock, f.stores.MaxOffline = clk, 6*24*time.Hour
	f.changelogEnds("table", 0, 2)
	st := f.open(t, "table", 0)
	restore(t, st, 0, "gone", "1", "kept", "2")
	clk.Advance(5 * 24 * time.Hour) // idle, then closed: caught up now
	mustClose(t, st)

	clk.Advance(5 * 24 * time.Hour)
	st = f.open(t, "table", 0)
	if off := mustOffset(t, st); off != 1 {
		t.Fatalf("GetOffset = %d after 5 days offline, want 1 (reused)", off)
	}
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, st)

	clk.Advance(7 * 24 * time.Hour)
	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != -2 {
		t.Fatalf("GetOffset = %d after 7 days offline, want -2 (restore from the start)", off)
	}
	if got := mustGet(t, st, "gone"); got != "<nil>" {
		t.Errorf("Get(gone) = %s, want it wiped", got)
	}
	if l := logs.String(); !strings.Contains(l, "too long ago") {
		t.Errorf("no warning saying why:\n%s", l)
	}
}

// A restore cut off before the changelog's end (a crash, a revoke) leaves
// a store that holds its changelog whole only as of when it last did: the
// offsets it writes while restoring keep that time, so MaxOffline counts
// from it, and a store that began empty and never caught up is wiped when
// opened again. Stamped with the time of each write instead, a store that
// restored a little more three days later would be trusted a week after it
// last held its changelog whole, past tombstones compaction may have
// dropped.
func TestPartialRestoreKeepsItsCaughtUpTime(t *testing.T) {
	dir := t.TempDir()
	var logs logBuffer
	clk := clock.NewFake(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	f := newFixture(t, dir, newLogger(&logs))
	f.stores.Clock, f.stores.MaxOffline = clk, 6*24*time.Hour

	// Caught up at day 0, then a partial restore at day 3.
	f.changelogEnds("table", 0, 1)
	st := f.open(t, "table", 0)
	restore(t, st, 0, "a", "1")
	mustClose(t, st)
	clk.Advance(3 * 24 * time.Hour)
	f.changelogEnds("table", 0, 3)
	st = f.open(t, "table", 0)
	partial(t, st, 1, "b", "2", "c", "3")
	mustClose(t, st)
	clk.Advance(3*24*time.Hour + time.Hour) // 6 days and an hour after it last held its changelog whole
	st = f.open(t, "table", 0)
	if off := mustOffset(t, st); off != -2 {
		t.Fatalf("GetOffset = %d, want -2: the store last held its changelog whole over 6 days ago", off)
	}
	mustClose(t, st)

	// Began empty, cut off: wiped when opened again, even a minute later.
	f.changelogEnds("table", 1, 2)
	st = f.open(t, "table", 1)
	partial(t, st, 0, "x", "1", "y", "2")
	mustClose(t, st)
	clk.Advance(time.Minute)
	st = f.open(t, "table", 1)
	if off := mustOffset(t, st); off != -2 {
		t.Fatalf("GetOffset = %d, want -2: a store that began empty never held its changelog whole", off)
	}
	// Restored to the end this time: reused.
	restore(t, st, 0, "x", "1", "y", "2")
	mustClose(t, st)
	clk.Advance(24 * time.Hour)
	st = f.open(t, "table", 1)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != 1 {
		t.Fatalf("GetOffset = %d after a full restore, want 1 (reused)", off)
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

// Restored records are written restoreBatch at a time with the offset
// reached, and reads during the restore see them.
func TestRestoredWritesAreBatchedAndSeen(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	st := f.open(t, "table", 0)
	n := restoreBatch + 10
	for i := range n {
		if err := st.Set(fmt.Sprint("k", i), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		if err := st.SetOffset(int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	s := st.(*store)
	if got := s.batch.Len(); got != 10 {
		t.Errorf("batch holds %d records after %d, want 10 (one batch written)", got, n)
	}
	off, _, _, _, err := readOffset(s.db)
	if err != nil || off != restoreBatch-2 {
		t.Errorf("LevelDB offset %d, %v after the first batch; want %d (at most the records written)", off, err, restoreBatch-2)
	}
	if got := mustGet(t, st, fmt.Sprint("k", n-1)); got != fmt.Sprint(n-1) {
		t.Errorf("read during restore: %s", got)
	}
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	mustClose(t, st)
	st = f.open(t, "table", 0)
	defer mustClose(t, st)
	if off := mustOffset(t, st); off != int64(n-1) {
		t.Errorf("GetOffset = %d, want %d", off, n-1)
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

// Marks follow the values through the restore, the overlay, the
// acknowledged writes and a reopen without a clean close; iterators skip
// them.
func TestMarksFollowValues(t *testing.T) {
	dir := t.TempDir()
	newMarked := func() *fixture {
		f := newFixture(t, dir, newLogger(io.Discard))
		f.stores.Mark(func(v []byte) bool { return bytes.HasPrefix(v, []byte("m")) })
		f.build = f.stores.Builder()
		return f
	}
	f := newMarked()
	st := f.open(t, "table", 0)
	restore(t, st, 0, "a", "m1", "b", "x", "c", "m1", "c", "x", "d", "m2")
	if got := marked(t, st); !slices.Equal(got, []string{"a", "d"}) {
		t.Fatalf("after restore: marked %v, want [a d]", got)
	}
	ea := f.set(t, st, "table", "a", "x")  // unmarked
	eb := f.set(t, st, "table", "b", "m3") // marked
	f.set(t, st, "table", "e", "m4")       // marked, never acknowledged
	ed := f.del(t, st, "table", "d")
	if got := marked(t, st); !slices.Equal(got, []string{"b", "e"}) {
		t.Fatalf("with the overlay: marked %v, want [b e]", got)
	}
	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(t, it), []string{"a=x", "b=m3", "c=x", "e=m4"}; !slices.Equal(got, want) {
		t.Fatalf("iterated %v, want %v (no marks)", got, want)
	}
	f.fake.ack(ea, 0, 10)
	f.fake.ack(eb, 0, 11)
	f.fake.ack(ed, 0, 12)
	waitOffset(t, st, 12)
	if got := marked(t, st); !slices.Equal(got, []string{"b", "e"}) {
		t.Fatalf("after the acknowledgements: marked %v", got)
	}
	// A crash (no Close): only what was acknowledged is on disk, marks included.
	st.(*store).db.Close()
	st.(*store).files.Close()
	st = newMarked().open(t, "table", 0)
	defer mustClose(t, st)
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	if got := marked(t, st); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after reopening: marked %v, want [b]", got)
	}
	it, err = st.IteratorWithRange([]byte("a"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(t, it), []string{"a=x", "b=m3", "c=x"}; !slices.Equal(got, want) {
		t.Fatalf("iterated %v, want %v", got, want)
	}
	plain := newFixture(t, t.TempDir(), newLogger(io.Discard)).open(t, "table", 1)
	defer mustClose(t, plain)
	if _, err := plain.(*store).Marked(); err == nil {
		t.Fatal("Marked on stores that keep no marks: no error")
	}
}

// ClosedClean: a close with every write acknowledged reports the offset the
// store holds; a close with a write still waiting reports an unclean close,
// and so does a store never closed.
func TestClosedClean(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, newLogger(io.Discard))
	st := f.open(t, "table", 0)
	restore(t, st, 0, "a", "a0")
	if _, ok := st.(*store).ClosedClean(); ok {
		t.Fatal("an open store reports a clean close")
	}
	e := f.set(t, st, "table", "a", "a1")
	f.fake.ack(e, 0, 7)
	waitOffset(t, st, 7)
	mustClose(t, st)
	if off, ok := st.(*store).ClosedClean(); !ok || off != 7 {
		t.Fatalf("ClosedClean = %d, %v after a close with everything acknowledged; want 7, true", off, ok)
	}

	st = f.open(t, "table", 0)
	f.set(t, st, "table", "b", "b1") // never acknowledged
	mustClose(t, st)
	if _, ok := st.(*store).ClosedClean(); ok {
		t.Fatal("a close that dropped a write reports a clean close")
	}
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
