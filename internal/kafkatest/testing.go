package kafkatest

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// testStartTimeout bounds Fetch plus Start in the test helpers; a first
// fetch downloads about 45 MB through Maven.
const testStartTimeout = 10 * time.Minute

// shared is the broker that ForTest hands to every test of a binary whose
// TestMain calls Main.
var shared struct {
	mu      sync.Mutex
	inMain  bool
	started bool
	broker  *Broker
	err     error
}

// Main runs the tests (m.Run) and then stops the broker that ForTest shared
// among them, if one was started. Use it as the package's TestMain:
//
//	func TestMain(m *testing.M) { kafkatest.Main(m) }
//
// It returns m.Run's exit code, which Go's test wrapper also uses when
// TestMain just returns.
func Main(m *testing.M) int {
	shared.mu.Lock()
	shared.inMain = true
	shared.mu.Unlock()

	code := m.Run()

	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.broker != nil {
		if err := shared.broker.Stop(); err != nil {
			slog.Error("kafkatest: stop shared broker", "err", err)
		}
		shared.broker = nil
	}
	return code
}

// ForTest returns the bootstrap address of a Kafka cluster for t.
//
// If KAFKA_BROKERS is set, ForTest returns it unchanged (it may list several
// comma-separated addresses) and starts nothing. Otherwise it starts a broker
// with Start: one for the whole test binary if TestMain calls Main, else one
// for t alone, stopped when t ends.
//
// When Java or Maven is missing, t is skipped with a message starting
// "SKIPPING REAL-KAFKA TESTS", or fails if CI=true. When the broker fails to
// start, t always fails, with the end of the broker's log.
func ForTest(t testing.TB) string {
	t.Helper()
	if brokers := os.Getenv("KAFKA_BROKERS"); brokers != "" {
		return brokers
	}

	shared.mu.Lock()
	if !shared.inMain {
		shared.mu.Unlock()
		return StartForTest(t).Addr()
	}
	if !shared.started {
		shared.started = true
		ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
		shared.broker, shared.err = Start(ctx)
		cancel()
	}
	b, err := shared.broker, shared.err
	shared.mu.Unlock()

	if err != nil {
		failOrSkip(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kafkatest: end of shared broker log %s:\n%s", b.LogPath(), b.logTail())
		}
	})
	return b.Addr()
}

// StartForTest starts a broker of its own for t, as Start does, and stops
// it when t ends. Use it for tests that Restart or Kill the broker; it
// ignores KAFKA_BROKERS. Missing tools and start failures are handled as in
// ForTest.
func StartForTest(t testing.TB, opts ...Option) *Broker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	b, err := Start(ctx, opts...)
	if err != nil {
		failOrSkip(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kafkatest: end of broker log %s:\n%s", b.LogPath(), b.logTail())
		}
		if err := b.Stop(); err != nil {
			t.Errorf("kafkatest: stop broker: %v", err)
		}
	})
	return b
}

// failOrSkip ends t after Start or Fetch failed with err: skip if only a
// tool is missing (fail on CI), fail otherwise.
func failOrSkip(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("kafkatest: Kafka broker failed to start: %v", err)
	}
	const hint = "install Java 17+ and Maven, or set KAFKA_BROKERS to an existing cluster"
	if onCI() {
		t.Fatalf("REAL-KAFKA TESTS CANNOT RUN (CI=%s): %v; %s", os.Getenv("CI"), err, hint)
	}
	t.Skipf("SKIPPING REAL-KAFKA TESTS: %v; %s", err, hint)
}

// onCI reports whether the CI environment variable is set to a true value.
func onCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// StartClusterForTest starts a cluster of n nodes for t, as StartCluster
// does, and stops it when t ends; if t failed, it logs the end of every
// node's log first. It ignores KAFKA_BROKERS. Missing tools and start
// failures are handled as in ForTest: under CI=true a cluster that cannot
// start fails t.
func StartClusterForTest(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testStartTimeout)
	defer cancel()
	c, err := StartCluster(ctx, n, opts...)
	if err != nil {
		failOrSkip(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, b := range c.nodes {
				t.Logf("kafkatest: end of node %d's log %s:\n%s", b.ID(), b.LogPath(), b.logTail())
			}
		}
		if err := c.Stop(); err != nil {
			t.Errorf("kafkatest: stop cluster: %v", err)
		}
	})
	return c
}
