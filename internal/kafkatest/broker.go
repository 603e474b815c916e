// Package kafkatest runs real Apache Kafka brokers for integration tests.
//
// A broker is a KRaft node (broker and controller in one JVM) started by the
// test itself on 127.0.0.1, from jars that Maven fetches once into a cache
// directory outside the work tree (see Fetch and CacheDir): one node alone
// (Start), or a cluster of several (StartCluster) whose nodes a test can
// kill and restart one by one. It needs Java 17+ on PATH (or in JAVA_HOME)
// and, for the first fetch, Maven.
//
// Most tests only need an address:
//
//	func TestMain(m *testing.M) { kafkatest.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		addr := kafkatest.ForTest(t) // shared broker, or $KAFKA_BROKERS
//		...
//	}
//
// Tests that restart or kill the broker start their own with StartForTest;
// tests of replication and failover start a cluster with
// StartClusterForTest(t, 3) and find the partitions' leaders with
// Cluster.Partitions or Cluster.Leaders.
//
// Environment:
//
//	KAFKA_BROKERS       use this existing cluster in ForTest instead of starting one
//	IVRSCHED_CACHE_DIR  cache root; the jars go to $IVRSCHED_CACHE_DIR/kafka-<version>
//	CI                  when true, missing Java or Maven fails tests instead of skipping them
//	JAVA_HOME           Java installation to use; otherwise java is looked up on PATH
package kafkatest

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"
)

// ErrUnavailable is wrapped by the errors of Start and Fetch when a tool they
// need (Java, Maven) is not installed. Nothing else is wrong in that case, so
// ForTest and StartForTest skip rather than fail, unless CI=true.
var ErrUnavailable = errors.New("kafkatest: required tool not installed")

// SaramaVersion is the sarama protocol version that kafkatest uses and
// tests with. Kafka 4 dropped the request versions of clients older than
// Kafka 2.1 (KIP-896), so sarama.Config.Version must be V2_1_0_0 or newer.
var SaramaVersion = sarama.V3_6_0_0

// Main class names in the kafka_2.13 jar.
const (
	mainKafka       = "kafka.Kafka"
	mainStorageTool = "kafka.tools.StorageTool"
)

// defaultJVMArgs suit a small (2-core) test machine: a bounded heap, the
// single-threaded collector and C1-only JIT, which starts the broker faster.
var defaultJVMArgs = []string{
	"-Xms64m",
	"-Xmx512m",
	"-XX:+UseSerialGC",
	"-XX:TieredStopAtLevel=1",
	"-XX:+ExitOnOutOfMemoryError",
	"-Djava.awt.headless=true",
	"-Djava.net.preferIPv4Stack=true",
}

//go:embed log4j2.properties
var log4jConfig []byte

// Broker is a Kafka broker running as a child process. Its data directory
// survives Restart and Kill; Stop removes it.
type Broker struct {
	id      int32 // node.id
	java    string
	libDir  string
	dir     string // temporary directory: config, data and broker.log
	addr    string
	ctrl    string // the controller listener's host:port
	jvmArgs []string
	timeout time.Duration
	// listeners are the extra listeners' addresses by name (WithListener).
	listeners map[string]string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// Option changes how Start configures the broker.
type Option func(*config)

type config struct {
	props      map[string]string // over defaultProperties
	jvmArgs    []string
	timeout    time.Duration
	listeners  []listener // WithListener
	formatArgs []string   // WithFormatArgs
}

// WithProperty sets a server.properties entry, overriding the default (for
// example WithProperty("auto.create.topics.enable", "true")).
func WithProperty(key, value string) Option {
	return func(c *config) { c.props[key] = value }
}

// WithJVMArgs appends arguments to the java command line, after the defaults
// (-Xmx512m -XX:+UseSerialGC ...), so that they can override them.
func WithJVMArgs(args ...string) Option {
	return func(c *config) { c.jvmArgs = append(c.jvmArgs, args...) }
}

// WithStartTimeout bounds how long Start and Restart wait for the broker to
// answer, not counting the fetch. The default is 90 seconds.
func WithStartTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// Start fetches Kafka if needed (see Fetch), formats a fresh KRaft log
// directory in a new temporary directory and starts a broker+controller on
// two free ports of 127.0.0.1. It returns once a client can read the
// cluster's metadata. Callers must Stop the broker.
//
// When Java or Maven is missing the error wraps ErrUnavailable; when the
// broker fails to start it includes the end of the broker's log.
func Start(ctx context.Context, opts ...Option) (*Broker, error) {
	nodes, err := startNodes(ctx, 1, opts)
	if err != nil {
		return nil, err
	}
	return nodes[0], nil
}

// startNodes starts a KRaft cluster of n nodes on 127.0.0.1, node ids 1 to
// n, each a broker and a controller in one JVM, all of them voters of a
// static controller quorum. It returns once every node answers and sees
// itself registered. On failure nothing is left running or on disk.
func startNodes(ctx context.Context, n int, opts []Option) ([]*Broker, error) {
	java, err := findJava()
	if err != nil {
		return nil, err
	}
	libDir, err := Fetch(ctx)
	if err != nil {
		return nil, err
	}
	cfg := config{props: map[string]string{}, timeout: 90 * time.Second}
	for _, opt := range opts {
		opt(&cfg)
	}
	clusterID, err := newClusterID()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2 * n) // per node: clients, then controller
	if err != nil {
		return nil, err
	}
	voters := make([]string, n)
	for i := range n {
		voters[i] = fmt.Sprintf("%d@127.0.0.1:%d", i+1, ports[2*i+1])
	}

	nodes := make([]*Broker, 0, n)
	fail := func(err error) ([]*Broker, error) {
		for _, b := range nodes {
			b.Kill()
			os.RemoveAll(b.dir)
		}
		return nil, err
	}
	for i := range n {
		dir, err := os.MkdirTemp("", "kafkatest-")
		if err != nil {
			return fail(fmt.Errorf("kafkatest: create broker directory: %w", err))
		}
		b := &Broker{
			id:      int32(i + 1),
			java:    java,
			libDir:  libDir,
			dir:     dir,
			addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i])),
			ctrl:    net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1])),
			timeout: cfg.timeout,
		}
		nodes = append(nodes, b)
	}
	// Format the nodes side by side: each is a JVM start.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, b := range nodes {
		props := defaultProperties(b.id, b.addr, ports[2*i+1], strings.Join(voters, ","), b.DataDir(), n)
		maps.Copy(props, cfg.props)
		if err := b.addListeners(props, cfg.listeners); err != nil {
			return fail(err)
		}
		wg.Go(func() { errs[i] = b.setUp(ctx, props, cfg.jvmArgs, cfg.formatArgs, clusterID) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	// A node answers only once a majority of the controllers runs: launch
	// them all before waiting for any.
	for _, b := range nodes {
		if err := b.launch(); err != nil {
			return fail(err)
		}
	}
	for _, b := range nodes {
		if err := b.awaitReady(ctx); err != nil {
			return fail(err)
		}
	}
	return nodes, nil
}

// setUp writes the configuration and formats the storage.
func (b *Broker) setUp(ctx context.Context, props map[string]string, jvmArgs, formatArgs []string, clusterID string) error {
	b.jvmArgs = append(slices.Clone(defaultJVMArgs),
		"-Dlog4j2.configurationFile="+filepath.Join(b.dir, "log4j2.properties"))
	b.jvmArgs = append(b.jvmArgs, jvmArgs...)

	if err := os.WriteFile(b.propertiesPath(), formatProperties(props), 0o644); err != nil {
		return fmt.Errorf("kafkatest: write server.properties: %w", err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "log4j2.properties"), log4jConfig, 0o644); err != nil {
		return fmt.Errorf("kafkatest: write log4j2.properties: %w", err)
	}
	logFile, err := b.openLog("format storage")
	if err != nil {
		return err
	}
	defer logFile.Close()
	// controller.quorum.voters names the quorum, so format needs no
	// --standalone or --initial-controllers.
	cmd := b.javaCommand(ctx, mainStorageTool, slices.Concat([]string{"format",
		"--config", b.propertiesPath(),
		"--cluster-id", clusterID}, formatArgs)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kafkatest: %s format: %w\n%s", mainStorageTool, err, b.logTail())
	}
	return nil
}

// defaultProperties configures node id of a KRaft cluster of n nodes
// (voters lists the controllers as id@host:port), tuned for fast tests.
// Kafka's internal topics get n replicas.
func defaultProperties(id int32, addr string, controllerPort int, voters, dataDir string, n int) map[string]string {
	controller := net.JoinHostPort("127.0.0.1", strconv.Itoa(controllerPort))
	replicas, minISR := strconv.Itoa(n), strconv.Itoa(min(2, n))
	return map[string]string{
		"process.roles":                                    "broker,controller",
		"node.id":                                          strconv.Itoa(int(id)),
		"controller.quorum.voters":                         voters,
		"controller.listener.names":                        "CONTROLLER",
		"listeners":                                        "PLAINTEXT://" + addr + ",CONTROLLER://" + controller,
		"advertised.listeners":                             "PLAINTEXT://" + addr,
		"inter.broker.listener.name":                       "PLAINTEXT",
		"listener.security.protocol.map":                   "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"log.dirs":                                         dataDir,
		"num.partitions":                                   "1",
		"default.replication.factor":                       replicas,
		"auto.create.topics.enable":                        "false",
		"auto.leader.rebalance.enable":                     "false",
		"group.initial.rebalance.delay.ms":                 "0",
		"group.min.session.timeout.ms":                     "1000", // allow short consumer sessions
		"offsets.topic.replication.factor":                 replicas,
		"offsets.topic.num.partitions":                     "1", // default 50: slows the first group join
		"transaction.state.log.replication.factor":         replicas,
		"transaction.state.log.min.isr":                    minISR,
		"transaction.state.log.num.partitions":             "1",
		"share.coordinator.state.topic.replication.factor": replicas,
		"share.coordinator.state.topic.min.isr":            minISR,
		"share.coordinator.state.topic.num.partitions":     "1",
		"log.segment.bytes":                                "1048576",  // the minimum: segments roll soon
		"log.cleaner.dedupe.buffer.size":                   "16777216", // default 128 MiB of heap
		// A killed broker can only register again once its old session has
		// expired (default 9 s), which would slow Restart after Kill.
		"broker.session.timeout.ms":    "3000",
		"broker.heartbeat.interval.ms": "500",
		"num.network.threads":          "2",
		"num.io.threads":               "2",
		"background.threads":           "2",
	}
}

func formatProperties(props map[string]string) []byte {
	var buf bytes.Buffer
	buf.WriteString("# Written by internal/kafkatest.\n")
	for _, k := range slices.Sorted(maps.Keys(props)) {
		fmt.Fprintf(&buf, "%s=%s\n", k, props[k])
	}
	return buf.Bytes()
}

// ID returns the broker's node.id (1 for a broker from Start, 1 to n in a
// Cluster).
func (b *Broker) ID() int32 { return b.id }

// Addr returns the broker's host:port for clients.
func (b *Broker) Addr() string { return b.addr }

// LogPath returns the file that collects the broker's output. It is removed
// by Stop.
func (b *Broker) LogPath() string { return filepath.Join(b.dir, "broker.log") }

// Restart stops the broker (SIGTERM, see Stop) if it is running and starts it
// again with the same ports, configuration and data, returning once it
// answers. It also brings a broker back after Kill. If the broker does not
// come up, the error includes the end of its log and the broker stays
// stopped.
func (b *Broker) Restart(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.halt() {
		return errKilled
	}
	if err := b.launchLocked(); err != nil {
		return err
	}
	return b.awaitReadyLocked(ctx)
}

// Kill ends the broker with SIGKILL, like a crash. Its data stays; Restart
// starts it again, Stop cleans up.
func (b *Broker) Kill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return
	}
	b.signal(syscall.SIGKILL)
	<-b.exited
	b.cmd = nil
}

// Stop ends the broker, politely first (SIGTERM, SIGKILL after 30 seconds),
// and removes its temporary directory with data and log. It is safe to call
// more than once.
func (b *Broker) Stop() error {
	return stopError(b.stop())
}

// stopError is a stop's error with its kill, if it killed.
func stopError(killed bool, err error) error {
	if killed {
		return errors.Join(errKilled, err)
	}
	return err
}

// stop is Stop that tells a kill apart from the other errors (Cluster.Stop
// forgives the kill of a node that outlived its quorum).
func (b *Broker) stop() (killed bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	killed = b.halt()
	if rmErr := os.RemoveAll(b.dir); rmErr != nil {
		err = fmt.Errorf("kafkatest: remove broker directory: %w", rmErr)
	}
	return killed, err
}

const stopTimeout = 30 * time.Second

// errKilled: the broker did not exit within stopTimeout of SIGTERM.
var errKilled = fmt.Errorf("kafkatest: broker ignored SIGTERM for %v and was killed", stopTimeout)

// halt stops the process, if any, and keeps the data; killed if it
// ignored SIGTERM for stopTimeout. b.mu must be held.
func (b *Broker) halt() (killed bool) {
	if b.cmd == nil {
		return false
	}
	defer func() { b.cmd = nil }()
	b.signal(syscall.SIGTERM)
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-b.exited:
		return false
	case <-timer.C:
	}
	b.signal(syscall.SIGKILL)
	<-b.exited
	return true
}

// signal sends sig to the broker's process group.
func (b *Broker) signal(sig syscall.Signal) {
	// The JVM leads its own process group (Setpgid), so -pid names the group.
	if err := syscall.Kill(-b.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		slog.Warn("kafkatest: signal broker", "signal", sig, "err", err)
	}
}

// launch starts the JVM and returns at once; awaitReady waits for it.
func (b *Broker) launch() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.launchLocked()
}

func (b *Broker) launchLocked() error {
	logFile, err := b.openLog("start broker")
	if err != nil {
		return err
	}
	defer logFile.Close() // the child keeps its own descriptor

	// Not CommandContext: the broker must outlive the start's ctx.
	cmd := b.javaCommand(context.Background(), mainKafka, b.propertiesPath())
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kafkatest: start %s: %w", b.java, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // the exit status of a stopped broker is of no interest
		close(exited)
	}()
	b.cmd, b.exited = cmd, exited
	return nil
}

func (b *Broker) awaitReady(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.awaitReadyLocked(ctx)
}

// awaitReadyLocked waits until the launched broker answers. On failure the
// process is killed and the error carries the log's tail.
func (b *Broker) awaitReadyLocked(ctx context.Context) error {
	if err := b.waitReady(ctx); err != nil {
		b.signal(syscall.SIGKILL)
		<-b.exited
		b.cmd = nil
		return fmt.Errorf("%w\n--- end of %s ---\n%s", err, b.LogPath(), b.logTail())
	}
	return nil
}

// waitReady polls until the broker answers and lists itself among the
// cluster's (unfenced) brokers, the process exits, ctx ends or the start
// timeout passes.
func (b *Broker) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	began := time.Now()
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	var lastErr error
	for {
		if lastErr = b.probe(); lastErr == nil {
			slog.Debug("kafkatest: broker ready", "addr", b.addr, "took", time.Since(began).Round(time.Millisecond))
			return nil
		}
		select {
		case <-b.exited:
			return fmt.Errorf("kafkatest: broker exited during start-up (%s)%s", b.cmd.ProcessState, b.portsTaken())
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: broker not ready on %s after %v: %w (last error: %v)",
				b.addr, time.Since(began).Round(time.Millisecond), ctx.Err(), lastErr)
		case <-ticker.C:
		}
	}
}

// probe asks the broker for the cluster description and looks for itself.
func (b *Broker) probe() error {
	admin, err := newAdmin([]string{b.addr}, "kafkatest-probe")
	if err != nil {
		return err
	}
	defer admin.Close()
	brokers, _, err := admin.DescribeCluster()
	if err != nil {
		return err
	}
	for _, r := range brokers {
		if r.ID() == b.id {
			return nil
		}
	}
	return fmt.Errorf("node %d not registered yet", b.id)
}

// newAdmin returns an admin client of addrs that gives up quickly (no
// retries): its callers poll.
func newAdmin(addrs []string, clientID string) (sarama.ClusterAdmin, error) {
	cfg := sarama.NewConfig()
	cfg.Version = SaramaVersion
	cfg.ClientID = clientID
	cfg.Net.DialTimeout = time.Second
	cfg.Net.ReadTimeout = 2 * time.Second
	cfg.Net.WriteTimeout = 2 * time.Second
	cfg.Metadata.Retry.Max = 0
	cfg.Admin.Retry.Max = 0
	return sarama.NewClusterAdmin(addrs, cfg)
}

func (b *Broker) javaCommand(ctx context.Context, mainClass string, args ...string) *exec.Cmd {
	argv := slices.Concat(b.jvmArgs, []string{"-cp", filepath.Join(b.libDir, "*"), mainClass}, args)
	cmd := exec.CommandContext(ctx, b.java, argv...)
	cmd.Dir = b.dir
	cmd.SysProcAttr = sysProcAttr()
	return cmd
}

func (b *Broker) propertiesPath() string { return filepath.Join(b.dir, "server.properties") }

// openLog opens broker.log for appending and writes a header line.
func (b *Broker) openLog(what string) (*os.File, error) {
	f, err := os.OpenFile(b.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: open broker log: %w", err)
	}
	fmt.Fprintf(f, "=== kafkatest: %s at %s ===\n", what, time.Now().Format(time.RFC3339Nano))
	return f, nil
}

// logTail returns the last lines of broker.log, for error messages.
func (b *Broker) logTail() string {
	f, err := os.Open(b.LogPath())
	if err != nil {
		return fmt.Sprintf("(no broker log: %v)", err)
	}
	defer f.Close()
	const maxBytes = 64 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > maxBytes {
		_, _ = f.Seek(-maxBytes, io.SeekEnd)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(reading broker log: %v)", err)
	}
	return tail(data, 60)
}

// tail returns the last n lines of out.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// findJava returns $JAVA_HOME/bin/java if it exists, else java from PATH.
func findJava() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		java := filepath.Join(home, "bin", "java")
		if _, err := os.Stat(java); err == nil {
			return java, nil
		}
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return "", fmt.Errorf("%w: Java 17+ is needed to run Kafka %s (%w)", ErrUnavailable, KafkaVersion, err)
	}
	return java, nil
}

// newClusterID returns a random Kafka UUID in its text form (URL-safe base64
// of 16 bytes without padding), as kafka-storage random-uuid prints it.
func newClusterID() (string, error) {
	for {
		var raw [16]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return "", fmt.Errorf("kafkatest: cluster id: %w", err)
		}
		id := base64.RawURLEncoding.EncodeToString(raw[:])
		if !strings.HasPrefix(id, "-") { // Kafka avoids these: they look like flags
			return id, nil
		}
	}
}

// DataDir is the broker's log directory (for measuring what it stores).
func (b *Broker) DataDir() string { return filepath.Join(b.dir, "data") }

// PID is the broker process's id, or 0 when it is not running (for
// measuring its CPU and memory).
func (b *Broker) PID() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil || b.cmd.Process == nil {
		return 0
	}
	return b.cmd.Process.Pid
}
