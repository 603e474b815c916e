package kafkatest

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// KafkaVersion is the Apache Kafka release that Fetch downloads and Start runs.
const KafkaVersion = "4.4.0"

// pomXML lists the broker's Maven dependencies. Its hash is stored in the
// marker file, so editing it invalidates every existing cache.
//
//go:embed pom.xml
var pomXML []byte

const markerName = "complete"

// CacheDir returns the directory that holds the fetched Kafka class path:
// $IVRSCHED_CACHE_DIR/kafka-<version> when IVRSCHED_CACHE_DIR is set,
// otherwise <os.UserCacheDir()>/ivrsched/kafka-<version>.
func CacheDir() (string, error) {
	root, err := CacheRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "kafka-"+KafkaVersion), nil
}

// CacheRoot is the project's cache outside the work tree, for downloads and
// builds that tests and benchmarks re-use: $IVRSCHED_CACHE_DIR when set,
// otherwise <os.UserCacheDir()>/ivrsched.
func CacheRoot() (string, error) {
	if root := os.Getenv("IVRSCHED_CACHE_DIR"); root != "" {
		return root, nil
	}
	userCache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locate cache directory (set IVRSCHED_CACHE_DIR): %w", err)
	}
	return filepath.Join(userCache, "ivrsched"), nil
}

// Fetch makes sure the jars of Kafka KafkaVersion and its runtime
// dependencies are in the cache directory (see CacheDir) and returns the
// directory that holds them, suitable for "java -cp '<libDir>/*'".
//
// The first call runs Maven (mvn must be on PATH; errors then wrap
// ErrUnavailable if it is not); later calls find the marker file written after
// a complete fetch and return at once without needing Maven. Concurrent calls,
// also from other processes such as parallel test binaries, are serialised by
// a lock file in the cache directory.
func Fetch(ctx context.Context) (libDir string, err error) {
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kafkatest: create cache directory: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()

	libDir = filepath.Join(dir, "libs")
	marker := filepath.Join(dir, markerName)
	want := pomHash()
	if got, err := os.ReadFile(marker); err == nil && bytes.Equal(bytes.TrimSpace(got), []byte(want)) {
		return libDir, nil
	}

	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", fmt.Errorf("%w: Maven is needed to fetch Kafka %s into %s (%w)", ErrUnavailable, KafkaVersion, dir, err)
	}
	slog.Info("kafkatest: fetching Kafka with Maven (first run only)", "version", KafkaVersion, "dir", dir)
	began := time.Now()

	// Start from scratch: whatever is here is incomplete or from another pom.
	if err := os.Remove(marker); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("kafkatest: remove stale marker: %w", err)
	}
	if err := os.RemoveAll(libDir); err != nil {
		return "", fmt.Errorf("kafkatest: remove stale libs: %w", err)
	}
	pom := filepath.Join(dir, "pom.xml")
	if err := os.WriteFile(pom, pomXML, 0o644); err != nil {
		return "", fmt.Errorf("kafkatest: write pom.xml: %w", err)
	}
	cmd := exec.CommandContext(ctx, mvn,
		"--batch-mode", "--quiet",
		"--file", pom,
		"dependency:copy-dependencies",
		"-DincludeScope=runtime",
		"-DoutputDirectory="+libDir,
	)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("kafkatest: mvn dependency:copy-dependencies: %w\n%s", err, tail(out, 40))
	}
	if err := writeFileAtomic(marker, []byte(want+"\n")); err != nil {
		return "", fmt.Errorf("kafkatest: write marker: %w", err)
	}
	slog.Info("kafkatest: fetched Kafka", "version", KafkaVersion, "libs", libDir, "took", time.Since(began).Round(time.Millisecond))
	return libDir, nil
}

func pomHash() string {
	sum := sha256.Sum256(pomXML)
	return hex.EncodeToString(sum[:])
}

// lockFile takes an exclusive flock on path, polling so that ctx can cancel
// the wait. The returned function releases the lock.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: open lock file: %w", err)
	}
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the file drops the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("kafkatest: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("kafkatest: wait for lock %s: %w", path, ctx.Err())
		case <-ticker.C:
		}
	}
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
