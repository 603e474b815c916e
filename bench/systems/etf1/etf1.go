// Package etf1 runs etf1/kafka-message-scheduler (module
// github.com/etf1/kafka-message-scheduler v0.0.9, its cmd/kafka binary,
// unmodified) as a benchmark subject.
//
// The binary is built from the bench module, which lists it as a tool
// (go.mod: `tool github.com/etf1/kafka-message-scheduler/cmd/kafka`), with
// cgo: confluent-kafka-go links its bundled static librdkafka. It runs as a
// separate process configured by environment variables, against the shared
// Kafka, with its own schedules, history and target topics.
//
// Schedules are produced as etf1's README describes: one message per task
// to the schedules topic, key = task ID, value = payload, headers
// scheduler-epoch (unix seconds: the due time truncated to the second, as
// time.Time.Unix gives it), scheduler-target-topic and scheduler-target-key
// (= task ID). The producer here partitions with Kafka's murmur2 (the Java
// client's default), so etf1 is configured, as its README prescribes for
// such producers, with the librdkafka producer setting
// partitioner=murmur2_random: its tombstones then land on the schedule's
// partition.
//
// etf1's epoch has a precision of one second and it fires at
// time.Unix(epoch, 0), so a task whose due time is not a whole second may
// fire up to one second early. That is measured, not corrected.
package etf1

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/ivrsched/ivrsched/bench/harness"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/topology"
)

// Version is the etf1 module version that is built and run.
const Version = "v0.0.9"

// Package is the import path of etf1's binary (a tool of the bench module).
const Package = "github.com/etf1/kafka-message-scheduler/cmd/kafka"

// Headers etf1 reads from a schedule (and copies to the target message).
const (
	HeaderEpoch       = "scheduler-epoch"
	HeaderTargetTopic = "scheduler-target-topic"
	HeaderTargetKey   = "scheduler-target-key"
)

// Names of the two variants of the anchors ("default logging", "warn logging").
const (
	NameDefaultLog = "etf1-default-log"
	NameWarnLog    = "etf1-warn-log"
)

// PprofAddr is the address etf1's cmd/kafka always listens on for pprof; it
// cannot be configured. A second instance on the same host only logs that
// the port is in use and runs without pprof.
const PprofAddr = ":6060"

// Options configures a variant.
type Options struct {
	// LogLevel is etf1's LOG_LEVEL (logrus level: "debug", "info", "warn",
	// ...). Empty leaves it unset: etf1's default, info, which logs about
	// four lines per fired schedule.
	LogLevel string
	// Binary is a prebuilt etf1 cmd/kafka binary. Empty builds it from the
	// bench module (once per process) into the cache directory.
	Binary string
	// ProducerConfig adds librdkafka producer settings to etf1's
	// configuration file (kafka.producer.configuration), for example
	// "queue.buffering.max.messages". partitioner is murmur2_random unless
	// set here.
	ProducerConfig map[string]string
	// SessionTimeout is etf1's SESSION_TIMEOUT (its consumer's
	// session.timeout.ms). Zero leaves etf1's default, 6 s.
	SessionTimeout time.Duration
}

// New returns the etf1 subject named name.
func New(name string, opts Options) harness.System {
	return &System{name: name, opts: opts}
}

// Variants returns the two variants of the anchors: etf1 with its default
// logging (info) and with LOG_LEVEL=warn.
func Variants() []harness.System {
	return []harness.System{
		New(NameDefaultLog, Options{}),
		New(NameWarnLog, Options{LogLevel: "warn"}),
	}
}

// System is etf1/kafka-message-scheduler under test.
type System struct {
	name string
	opts Options

	env     harness.Env
	brokers []string
	bin     string
	envVars []string // etf1's configuration, KEY=value
	logPath string

	schedules, history, target, group string

	admin    sarama.ClusterAdmin
	client   sarama.Client // producer's
	producer sarama.AsyncProducer
	prodDone chan struct{}

	mu      sync.Mutex
	proc    *harness.Process // nil when not running
	members []string         // group members seen when etf1 was last ready
}

// Name is the subject's name.
func (s *System) Name() string { return s.name }

// Topics returns the schedules, history and target topics (after Start).
func (s *System) Topics() (schedules, history, target string) {
	return s.schedules, s.history, s.target
}

// LogPath is the file that collects etf1's stdout and stderr (after Start).
func (s *System) LogPath() string { return s.logPath }

// EnvVars returns the environment etf1 is started with (after Start).
func (s *System) EnvVars() []string { return slices.Clone(s.envVars) }

// Start creates the topics, builds etf1, starts it and waits until its
// consumer has joined its group and holds every schedules partition.
func (s *System) Start(ctx context.Context, env harness.Env) (err error) {
	s.env = env
	s.brokers = strings.Split(env.KafkaBrokers, ",")
	parts := env.Partitions
	if parts < 1 {
		parts = 1
	}
	s.env.Partitions = parts

	// A suffix per run, so that two runs never share (and re-fire) schedules.
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	prefix := s.name + "-" + hex.EncodeToString(b[:]) + "-"
	s.schedules, s.history, s.target = prefix+"schedules", prefix+"history", prefix+"target"
	s.group = prefix + "cg"

	defer func() {
		if err != nil {
			s.closeClients()
		}
	}()
	cfg := saramaConfig()
	if s.admin, err = sarama.NewClusterAdmin(s.brokers, cfg); err != nil {
		return fmt.Errorf("etf1: connect admin: %w", err)
	}
	if err := s.createTopics(ctx); err != nil {
		return err
	}
	if s.client, err = sarama.NewClient(s.brokers, cfg); err != nil {
		return fmt.Errorf("etf1: connect producer: %w", err)
	}
	if s.producer, err = sarama.NewAsyncProducerFromClient(s.client); err != nil {
		return fmt.Errorf("etf1: producer: %w", err)
	}
	s.prodDone = make(chan struct{})
	go s.dispatch()

	if s.bin = s.opts.Binary; s.bin == "" {
		if s.bin, err = Build(ctx); err != nil {
			return err
		}
	}
	if err := s.configure(); err != nil {
		return err
	}
	return s.launch(ctx)
}

func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_6_0_0
	c.ClientID = "bench-etf1"
	c.ChannelBufferSize = 4096
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	c.Producer.Retry.Max = 10
	// No Flush settings: sarama then sends as soon as a broker connection
	// is free (up to 5 requests in flight), batching what queued meanwhile.
	c.Producer.Partitioner = sarama.NewCustomHashPartitioner(topology.Murmur2())
	c.Consumer.Return.Errors = false
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	return c
}

// createTopics creates the three topics; the schedules topic compacted with
// unlimited retention, as etf1's README prescribes.
func (s *System) createTopics(ctx context.Context) error {
	minusOne := "-1"
	compact := "compact"
	specs := []struct {
		name string
		cfg  map[string]*string
	}{
		{s.schedules, map[string]*string{"cleanup.policy": &compact, "retention.ms": &minusOne}},
		{s.history, nil},
		{s.target, nil},
	}
	for _, t := range specs {
		err := s.admin.CreateTopic(t.name, &sarama.TopicDetail{
			NumPartitions:     int32(s.env.Partitions),
			ReplicationFactor: 1,
			ConfigEntries:     t.cfg,
		}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("etf1: create topic %s: %w", t.name, err)
		}
	}
	// Wait until the metadata shows every partition with a leader.
	client, err := sarama.NewClient(s.brokers, saramaConfig())
	if err != nil {
		return err
	}
	defer client.Close()
	for {
		ok := true
		for _, t := range specs {
			if err := client.RefreshMetadata(t.name); err != nil {
				ok = false
				break
			}
			ps, err := client.Partitions(t.name)
			if err != nil || len(ps) != s.env.Partitions {
				ok = false
				break
			}
			for _, p := range ps {
				if _, err := client.Leader(t.name, p); err != nil {
					ok = false
				}
			}
		}
		if ok {
			return nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return fmt.Errorf("etf1: topics not ready: %w", err)
		}
	}
}

// configure writes etf1's configuration file and environment.
func (s *System) configure() error {
	producer := map[string]string{"partitioner": "murmur2_random"}
	for k, v := range s.opts.ProducerConfig {
		producer[k] = v
	}
	var yaml strings.Builder
	yaml.WriteString("kafka.producer.configuration:\n")
	for _, k := range slices.Sorted(maps.Keys(producer)) {
		fmt.Fprintf(&yaml, "    %s: %s\n", k, strconv.Quote(producer[k]))
	}
	cfgPath := filepath.Join(s.env.WorkDir, s.name+"-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml.String()), 0o644); err != nil {
		return fmt.Errorf("etf1: write configuration file: %w", err)
	}
	serverAddr, err := freeAddr()
	if err != nil {
		return err
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return err
	}
	s.envVars = []string{
		"BOOTSTRAP_SERVERS=" + s.env.KafkaBrokers,
		"SCHEDULES_TOPICS=" + s.schedules,
		"HISTORY_TOPIC=" + s.history,
		"GROUP_ID=" + s.group,
		"SERVER_ADDR=" + serverAddr,
		"METRICS_ADDR=" + metricsAddr,
		"CONFIGURATION_FILE=" + cfgPath,
	}
	if s.opts.LogLevel != "" {
		s.envVars = append(s.envVars, "LOG_LEVEL="+s.opts.LogLevel)
	}
	if s.opts.SessionTimeout > 0 {
		s.envVars = append(s.envVars, "SESSION_TIMEOUT="+strconv.FormatInt(s.opts.SessionTimeout.Milliseconds(), 10))
	}
	s.logPath = filepath.Join(s.env.WorkDir, s.name+".log")
	return nil
}

// etf1Vars are the variables etf1 reads; inherited values are dropped so
// that only s.envVars configure it.
var etf1Vars = []string{
	"BOOTSTRAP_SERVERS", "CONFIGURATION_FILE", "GRAYLOG_SERVER", "GROUP_ID",
	"HISTORY_TOPIC", "METRICS_ADDR", "SERVER_ADDR", "SESSION_TIMEOUT",
	"SCHEDULES_TOPICS", "SCHEDULE_GRACE_INTERVAL", "SINCE_DELTA", "LOG_LEVEL",
}

// launch starts the etf1 process and waits until it is ready.
func (s *System) launch(ctx context.Context) error {
	s.mu.Lock()
	if s.proc != nil {
		s.mu.Unlock()
		return errors.New("etf1: already running")
	}
	cmd := exec.Command(s.bin)
	cmd.Dir = s.env.WorkDir
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(etf1Vars, name)
	})
	cmd.Env = append(cmd.Env, s.envVars...)
	proc, err := harness.StartProcess(cmd, s.logPath)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("etf1: %w", err)
	}
	s.proc = proc
	stale := s.members
	s.mu.Unlock()

	if s.env.Log != nil {
		s.env.Log.Info("etf1 started", "system", s.name, "pid", proc.PID(), "log", s.logPath)
	}
	members, err := s.waitReady(ctx, proc.Exited(), stale)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.members = members
	s.mu.Unlock()
	return nil
}

// waitReady waits until etf1's group is stable, none of its members is one
// of stale (the members of a killed instance) and every schedules partition
// is assigned. etf1 then reads each assigned partition from offset 0.
func (s *System) waitReady(ctx context.Context, exited <-chan struct{}, stale []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		members, ready, err := s.groupReady(stale)
		if err == nil && ready {
			return members, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("etf1: exited before it was ready; end of %s:\n%s", s.logPath, harness.Tail(s.logPath, 4096))
		case <-ctx.Done():
			return nil, fmt.Errorf("etf1: not ready (group %s: err %v): %w; end of %s:\n%s",
				s.group, err, ctx.Err(), s.logPath, harness.Tail(s.logPath, 4096))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *System) groupReady(stale []string) (members []string, ready bool, err error) {
	groups, err := s.admin.DescribeConsumerGroups([]string{s.group})
	if err != nil {
		return nil, false, err
	}
	if len(groups) != 1 {
		return nil, false, fmt.Errorf("described %d groups", len(groups))
	}
	g := groups[0]
	if g.Err != sarama.ErrNoError {
		return nil, false, g.Err
	}
	if g.State != "Stable" || len(g.Members) == 0 {
		return nil, false, nil
	}
	assigned := 0
	for id, m := range g.Members {
		if slices.Contains(stale, id) {
			return nil, false, nil
		}
		members = append(members, id)
		a, err := m.GetMemberAssignment()
		if err != nil || a == nil {
			continue
		}
		assigned += len(a.Topics[s.schedules])
	}
	return members, assigned == s.env.Partitions, nil
}

// Schedule produces one schedule per task and returns once Kafka has
// acknowledged all of them (acks=all).
func (s *System) Schedule(ctx context.Context, tasks []harness.Task) error {
	if s.producer == nil {
		return errors.New("etf1: not started")
	}
	b := &batch{}
	b.wg.Add(len(tasks))
	for i, t := range tasks {
		value := t.Payload
		if len(value) == 0 {
			// etf1 takes an empty value for a tombstone (delete).
			value = []byte(t.ID)
		}
		msg := &sarama.ProducerMessage{
			Topic: s.schedules,
			Key:   sarama.StringEncoder(t.ID),
			Value: sarama.ByteEncoder(value),
			Headers: []sarama.RecordHeader{
				{Key: []byte(HeaderEpoch), Value: strconv.AppendInt(nil, t.Due.Unix(), 10)},
				{Key: []byte(HeaderTargetTopic), Value: []byte(s.target)},
				{Key: []byte(HeaderTargetKey), Value: []byte(t.ID)},
			},
			Metadata: b,
		}
		select {
		case s.producer.Input() <- msg:
		case <-ctx.Done():
			b.wg.Add(-(len(tasks) - i))
			return ctx.Err()
		}
	}
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed > 0 {
		return fmt.Errorf("etf1: %d of %d schedules not produced: %w", b.failed, len(tasks), b.err)
	}
	return nil
}

// batch tracks the acknowledgements of one Schedule call.
type batch struct {
	wg     sync.WaitGroup
	mu     sync.Mutex
	failed int
	err    error
}

// dispatch hands the producer's acknowledgements to their batches.
func (s *System) dispatch() {
	defer close(s.prodDone)
	successes, errs := s.producer.Successes(), s.producer.Errors()
	for successes != nil || errs != nil {
		select {
		case m, ok := <-successes:
			if !ok {
				successes = nil
				continue
			}
			if b, ok := m.Metadata.(*batch); ok {
				b.wg.Done()
			}
		case e, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if b, ok := e.Msg.Metadata.(*batch); ok {
				b.mu.Lock()
				b.failed++
				if b.err == nil {
					b.err = e.Err
				}
				b.mu.Unlock()
				b.wg.Done()
			}
		}
	}
}

// Observe consumes the target topic from its oldest offset and reports
// every record as a fire: ID = record key, At = when it was received, Due =
// the scheduler-epoch header etf1 copied from the schedule (whole seconds).
func (s *System) Observe(ctx context.Context, out chan<- harness.Fire) error {
	return harness.ObserveTopic(ctx, s.brokers, s.target, out, func(m *sarama.ConsumerMessage) (harness.Fire, bool) {
		return harness.Fire{ID: string(m.Key), Due: epochOf(m.Headers)}, true
	})
}

func epochOf(headers []*sarama.RecordHeader) time.Time {
	for _, h := range headers {
		if h != nil && string(h.Key) == HeaderEpoch {
			if sec, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
				return time.Unix(sec, 0)
			}
		}
	}
	return time.Time{}
}

// PIDs is the etf1 process, if running.
func (s *System) PIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return harness.PIDs(s.proc)
}

// Crash kills etf1 with SIGKILL and waits for it to exit.
func (s *System) Crash() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	err := s.proc.Kill()
	s.proc = nil
	return err
}

// Recover starts etf1 again with the same configuration and waits until it
// holds every partition: after a Crash, once the group coordinator has
// expired the killed member (its session timeout, 6 s by default).
func (s *System) Recover(ctx context.Context) error {
	return s.launch(ctx)
}

// Stop ends etf1 (SIGTERM, SIGKILL after 30 s) and closes the clients.
func (s *System) Stop() error {
	s.mu.Lock()
	var err error
	if s.proc != nil {
		if e := s.proc.Stop(30 * time.Second); e != nil {
			err = fmt.Errorf("etf1: %w", e)
		}
		s.proc = nil
	}
	s.mu.Unlock()
	if s.env.Log != nil && s.logPath != "" {
		if fi, e := os.Stat(s.logPath); e == nil {
			s.env.Log.Info("etf1 stopped", "system", s.name, "log", s.logPath, "log_bytes", fi.Size())
		}
	}
	return errors.Join(err, s.closeClients())
}

func (s *System) closeClients() error {
	var err error
	if s.producer != nil {
		s.producer.AsyncClose()
		select {
		case <-s.prodDone:
		case <-time.After(30 * time.Second):
			err = errors.Join(err, errors.New("etf1: producer did not close within 30 s"))
		}
		s.producer = nil
	}
	if s.client != nil {
		if e := s.client.Close(); e != nil && !errors.Is(e, sarama.ErrClosedClient) {
			err = errors.Join(err, e)
		}
		s.client = nil
	}
	if s.admin != nil {
		err = errors.Join(err, s.admin.Close())
		s.admin = nil
	}
	return err
}

// Build builds etf1's cmd/kafka from the bench module (once per process)
// and returns the binary's path in the cache directory:
// $IVRSCHED_CACHE_DIR/bench, or <user cache dir>/ivrsched/bench.
func Build(ctx context.Context) (string, error) {
	build.Lock()
	defer build.Unlock()
	if build.path == "" {
		path, err := doBuild(ctx)
		if err != nil {
			return "", err
		}
		build.path = path
	}
	return build.path, nil
}

var build struct {
	sync.Mutex
	path string
}

func doBuild(ctx context.Context) (string, error) {
	modDir, err := harness.ModuleDir()
	if err != nil {
		return "", fmt.Errorf("etf1: %w (or set Options.Binary)", err)
	}
	root, err := kafkatest.CacheRoot()
	if err != nil {
		return "", fmt.Errorf("etf1: %w", err)
	}
	dir := filepath.Join(root, "bench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "etf1-kafka-message-scheduler-"+Version)
	tmp, err := os.CreateTemp(dir, ".etf1-build-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := harness.GoBuild(ctx, modDir, tmp.Name(), Package, "CGO_ENABLED=1"); err != nil {
		return "", fmt.Errorf("etf1: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
