package localstore

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

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

func open(t *testing.T, b storage.Builder, topic string, partition int32) storage.Storage {
	t.Helper()
	st, err := b(topic, partition)
	if err != nil {
		t.Fatalf("builder(%s, %d): %v", topic, partition, err)
	}
	if err := st.Open(); err != nil {
		t.Fatalf("Open(%s, %d): %v", topic, partition, err)
	}
	return st
}

func mustSet(t *testing.T, st storage.Storage, kv map[string]string) {
	t.Helper()
	for k, v := range kv {
		if err := st.Set(k, []byte(v)); err != nil {
			t.Fatalf("Set(%s): %v", k, err)
		}
	}
}

func mustGet(t *testing.T, st storage.Storage, key string) []byte {
	t.Helper()
	v, err := st.Get(key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	return v
}

func markerExists(t *testing.T, dir string) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(dir, MarkerName))
	if err == nil {
		return true
	}
	if !os.IsNotExist(err) {
		t.Fatalf("stat marker: %v", err)
	}
	return false
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read dir: %v", err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestBuilderDoesNotTouchDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	st, err := Builder(dir, newLogger(io.Discard))("table", 0)
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
	if _, err := Builder(dir, nil)("a/b", 0); err == nil {
		t.Fatal("builder accepted a topic with a path separator")
	}
}

func TestCleanCycle(t *testing.T) {
	dir := t.TempDir()
	var logs logBuffer
	b := Builder(dir, newLogger(&logs))
	pdir := filepath.Join(dir, "table.3")

	st := open(t, b, "table", 3)
	if markerExists(t, pdir) {
		t.Fatal("marker present after first Open")
	}
	kv := map[string]string{"a": "1", "b": "2", "c": "3"}
	mustSet(t, st, kv)
	if err := st.Set("gone", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete("gone"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetOffset(42); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !markerExists(t, pdir) {
		t.Fatal("marker absent after clean Close")
	}
	// A second Close must not panic (goka's storage would close a closed
	// channel) and must not fail.
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	st = open(t, b, "table", 3)
	if markerExists(t, pdir) {
		t.Fatal("marker still present while the store is open")
	}
	for k, want := range kv {
		if got := mustGet(t, st, k); string(got) != want {
			t.Errorf("Get(%s) = %q, want %q", k, got, want)
		}
	}
	if ok, err := st.Has("gone"); err != nil || ok {
		t.Errorf("Has(gone) = %v, %v; want false, nil", ok, err)
	}
	if off, err := st.GetOffset(-1); err != nil || off != 42 {
		t.Errorf("GetOffset(-1) = %d, %v; want 42, nil", off, err)
	}
	// The iterator skips goka's __offset key.
	it, err := st.Iterator()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for it.Next() {
		keys = append(keys, string(it.Key()))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	it.Release()
	if want := []string{"a", "b", "c"}; !slices.Equal(keys, want) {
		t.Errorf("iterated keys %v, want %v", keys, want)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("clean cycle logged a warning:\n%s", logs.String())
	}
}

const (
	crashDirEnv = "LOCALSTORE_CRASH_DIR"
	crashReady  = "localstore-crash-helper: wrote state, killing myself"
)

// TestCrashHelper runs only as the child process of TestCrashWipesState: it
// opens the store, writes, and kills itself with SIGKILL without closing.
func TestCrashHelper(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process for TestCrashWipesState")
	}
	st, err := Builder(dir, newLogger(os.Stderr))("table", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if err := st.Set(k, []byte("v-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetOffset(7); err != nil {
		t.Fatal(err)
	}
	// Persist the offset to LevelDB as goka does after recovery.
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
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

func TestCrashWipesState(t *testing.T) {
	dir := t.TempDir()
	pdir := filepath.Join(dir, "table.0")

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

	if markerExists(t, pdir) {
		t.Fatal("marker present after crash")
	}

	// Show that the killed process's writes did reach the disk, so plain goka
	// LevelDB storage would trust them: open a copy without our wrapper.
	cp := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(cp, os.DirFS(pdir)); err != nil {
		t.Fatalf("copy: %v", err)
	}
	db, err := leveldb.OpenFile(cp, nil)
	if err != nil {
		t.Fatalf("open copy: %v", err)
	}
	plain, _ := storage.New(db)
	if got := mustGet(t, plain, "a"); string(got) != "v-a" {
		t.Fatalf("plain goka storage: Get(a) = %q, want %q (the crash test would prove nothing)", got, "v-a")
	}
	if off, err := plain.GetOffset(-2); err != nil || off != 7 {
		t.Fatalf("plain goka storage: GetOffset = %d, %v; want 7", off, err)
	}
	if err := plain.Close(); err != nil {
		t.Fatal(err)
	}

	var logs logBuffer
	st := open(t, Builder(dir, newLogger(&logs)), "table", 0)
	defer func() {
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	for _, k := range []string{"a", "b", "c"} {
		if v := mustGet(t, st, k); v != nil {
			t.Errorf("Get(%s) = %q after crash, want nil (state wiped)", k, v)
		}
	}
	if off, err := st.GetOffset(-2); err != nil || off != -2 {
		t.Errorf("GetOffset(-2) = %d, %v after crash; want -2 (restore from changelog)", off, err)
	}
	l := logs.String()
	if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "not closed cleanly, restoring from changelog") ||
		!strings.Contains(l, "topic=table") || !strings.Contains(l, "partition=0") {
		t.Errorf("missing warning with topic and partition, logs:\n%s", l)
	}
	if markerExists(t, pdir) {
		t.Error("marker present while open")
	}
}

func TestSecondOpenIsLocked(t *testing.T) {
	dir := t.TempDir()
	b := Builder(dir, newLogger(io.Discard))
	pdir := filepath.Join(dir, "table.1")

	first := open(t, b, "table", 1)
	mustSet(t, first, map[string]string{"k": "v"})
	before := listDir(t, pdir)

	second, err := b("table", 1)
	if err != nil {
		t.Fatal(err)
	}
	err = second.Open()
	if err == nil {
		second.Close()
		t.Fatal("second Open of a locked directory succeeded")
	}
	t.Logf("second Open: %v", err)
	if !strings.Contains(err.Error(), pdir) {
		t.Errorf("error %q does not name the directory %s", err, pdir)
	}
	if !strings.Contains(err.Error(), "locked") {
		t.Errorf("error %q does not say the directory is locked", err)
	}
	// goka calls Close after a failed Open: it must not mark the other
	// process's live state as clean.
	if err := second.Close(); err != nil {
		t.Errorf("Close after failed Open: %v", err)
	}
	if markerExists(t, pdir) {
		t.Fatal("failed Open + Close wrote the clean marker into a directory in use")
	}
	// The failed Open must not have wiped the live store.
	if after := listDir(t, pdir); !slices.Equal(before, after) {
		t.Errorf("directory changed by failed Open: before %v, after %v", before, after)
	}

	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	st := open(t, b, "table", 1)
	if got := mustGet(t, st, "k"); string(got) != "v" {
		t.Errorf("Get(k) = %q after reopen, want v", got)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSeparateDirectories(t *testing.T) {
	dir := t.TempDir()
	b := Builder(dir, newLogger(io.Discard))
	type tp struct {
		topic     string
		partition int32
	}
	parts := []tp{{"t1", 0}, {"t1", 1}, {"t2", 0}}

	// All open at once: each has its own lock.
	stores := make([]storage.Storage, len(parts))
	for i, p := range parts {
		stores[i] = open(t, b, p.topic, p.partition)
		mustSet(t, stores[i], map[string]string{"k": p.topic + "/" + string(rune('0'+p.partition))})
		if err := stores[i].SetOffset(int64(100 + i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range stores {
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}

	want := []string{"t1.0", "t1.1", "t2.0"}
	if got := listDir(t, dir); !slices.Equal(got, want) {
		t.Fatalf("directories %v, want %v", got, want)
	}
	for i, p := range parts {
		if !markerExists(t, filepath.Join(dir, want[i])) {
			t.Errorf("%s: no marker after Close", want[i])
		}
		st := open(t, b, p.topic, p.partition)
		wantV := p.topic + "/" + string(rune('0'+p.partition))
		if got := mustGet(t, st, "k"); string(got) != wantV {
			t.Errorf("%s: Get(k) = %q, want %q", want[i], got, wantV)
		}
		if off, err := st.GetOffset(-1); err != nil || off != int64(100+i) {
			t.Errorf("%s: GetOffset = %d, %v; want %d", want[i], off, err, 100+i)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInvalidateRemovesMarkers(t *testing.T) {
	dir := t.TempDir()
	b := Builder(dir, nil)
	for _, part := range []int32{0, 1} {
		st, err := b("tbl", part)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Open(); err != nil {
			t.Fatal(err)
		}
		if err := st.Set("k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := Invalidate(dir); err != nil {
		t.Fatal(err)
	}
	st, err := b("tbl", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if v, err := st.Get("k"); err != nil || v != nil {
		t.Fatalf("after Invalidate the store must restore from the changelog, got %q %v", v, err)
	}
}

// After recovery the offset lives in memory and reaches disk on Close.
func TestOffsetAfterRecoveryIsWrittenOnClose(t *testing.T) {
	dir := t.TempDir()
	b := Builder(dir, nil)
	st, err := b("tbl", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	if err := st.SetOffset(10); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkRecovered(); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{11, 12, 100} {
		if err := st.SetOffset(off); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := st.GetOffset(-1); got != 100 {
		t.Fatalf("offset while open %d, want 100", got)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = b("tbl", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Open(); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got, _ := st.GetOffset(-1); got != 100 {
		t.Fatalf("offset after a clean close %d, want 100", got)
	}
}

// Restored records are written in batches; every read, MarkRecovered and a
// clean Close see all of them, the partial last batch included.
func TestRestoredWritesAreBatchedAndSeen(t *testing.T) {
	dir := t.TempDir()
	b := Builder(dir, nil)
	st := open(t, b, "tbl", 0)
	n := restoreBatch*2 + 7
	for i := range n {
		if err := st.Set(fmt.Sprintf("k%05d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Delete("k00003"); err != nil {
		t.Fatal(err)
	}
	if v := mustGet(t, st, fmt.Sprintf("k%05d", n-1)); string(v) != "v" {
		t.Fatalf("last restored record before MarkRecovered: %q", v)
	}
	if v, _ := st.Get("k00003"); v != nil {
		t.Fatal("a restored delete is not seen")
	}
	if err := st.Set("tail", []byte("t")); err != nil { // left in the batch
		t.Fatal(err)
	}
	count := func(st storage.Storage) int {
		it, err := st.Iterator()
		if err != nil {
			t.Fatal(err)
		}
		defer it.Release()
		c := 0
		for it.Next() {
			c++
		}
		return c
	}
	if got := count(st); got != n { // n-1 records, the deleted one gone, plus tail
		t.Fatalf("iterator sees %d records, want %d", got, n)
	}
	if err := st.Set("tail2", []byte("t")); err != nil { // left in the batch at Close
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = open(t, b, "tbl", 0)
	defer st.Close()
	if got := count(st); got != n+1 {
		t.Fatalf("after a clean close %d records, want %d", got, n+1)
	}
}
