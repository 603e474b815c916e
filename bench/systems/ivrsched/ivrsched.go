// Package ivrsched runs this project's binary as a benchmark subject: all
// roles in one process or scheduler and dialer as separate processes,
// against the shared Kafka or on its own embedded broker.
package ivrsched

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/bench/harness"
	"github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/topology"
)

// Mode selects how ivrsched runs.
type Mode int

const (
	// OneProcess runs `ivrsched run` against the shared Kafka.
	OneProcess Mode = iota
	// Processes runs `ivrsched scheduler` and `ivrsched dialer` apart.
	Processes
	// Embedded runs `ivrsched run` on its own embedded broker.
	Embedded
	// SchedulerOnly runs `ivrsched scheduler` alone: its calls on ivr-calls
	// are the fires, and nothing places them (a deployment whose dialers
	// run on other machines). NewSchedulerOnly returns it.
	SchedulerOnly
)

// System is ivrsched under test.
type System struct {
	name   string
	mode   Mode
	extra  []string // more flags for every process
	sched  []string // more flags for the scheduler (or the single process)
	zone   string   // the users' time zone; "": the phone number's
	env    harness.Env
	bin    string
	topics topology.Topics
	broker string // what clients use
	data   string
	web    string // the web UI of `ivrsched run` (pprof included)
	// suppressions is how many entries the do-not-call list holds before
	// the first phase (WithSuppressions).
	suppressions int

	mu     sync.Mutex
	procs  []*proc // scheduler first
	joiner *proc   // a second scheduler instance (Join), or nil
	joins  int     // Joins so far, for a fresh data directory each
}

type proc struct {
	args []string
	log  string           // its log file, in the work directory
	p    *harness.Process // nil until launched
}

// New returns the subject; extra flags go to every ivrsched process.
func New(name string, mode Mode, extra ...string) *System {
	return &System{name: name, mode: mode, extra: extra}
}

// NewSchedulerOnly returns the scheduler alone (SchedulerOnly): a system
// without placements, so the harness measures its fires and not a dialer's.
func NewSchedulerOnly(name string, extra ...string) harness.Scalable {
	return schedulerOnly{New(name, SchedulerOnly, extra...)}
}

// schedulerOnly hides ObservePlaced (harness.Placer): nothing places its
// calls.
type schedulerOnly struct{ harness.Scalable }

// Of returns the ivrsched System that sys is or wraps (NewSchedulerOnly),
// for its options (WithBinary, WithSchedulerFlags).
func Of(sys harness.System) (*System, bool) {
	switch s := sys.(type) {
	case *System:
		return s, true
	case schedulerOnly:
		return Of(s.Scalable)
	}
	return nil, false
}

// WithSchedulerFlags adds flags for the scheduler role only (the single
// process in OneProcess and Embedded modes), e.g. a log level that would
// make the dialer log every call.
func (s *System) WithSchedulerFlags(flags ...string) *System {
	s.sched = append(s.sched, flags...)
	return s
}

// WithBinary runs bin instead of a build of this checkout (an older
// version, for a before-and-after).
func (s *System) WithBinary(bin string) *System {
	s.bin = bin
	return s
}

// WithTimeZone onboards every user with the time zone tz (the calling
// policy reads its windows in it), instead of their number's zone.
func (s *System) WithTimeZone(tz string) *System {
	s.zone = tz
	return s
}

// DaytimeZone names a fixed-offset zone where it is about noon at now, so
// that a run of a few minutes falls inside any daytime calling window.
func DaytimeZone(now time.Time) string {
	off := (12 - now.UTC().Hour() + 24) % 24 // hours east of UTC
	if off > 14 {
		off -= 24
	}
	switch {
	case off == 0:
		return "Europe/London" // GMT in winter, BST in summer: noon or 13:00
	case off > 0:
		return fmt.Sprintf("Etc/GMT-%d", off) // the IANA names' sign is inverted
	default:
		return fmt.Sprintf("Etc/GMT+%d", -off)
	}
}

// Name is the subject's name.
func (s *System) Name() string { return s.name }

// EmbeddedDataDir is where the embedded broker keeps its log (for bytes).
func (s *System) EmbeddedDataDir() string { return filepath.Join(s.data, "run", "broker") }

// Broker is the bootstrap address the subject's clients use.
func (s *System) Broker() string { return s.broker }

// Start builds the binary and starts the processes.
func (s *System) Start(ctx context.Context, env harness.Env) error {
	s.env = env
	s.topics = topology.NewTopics(s.name + "-")
	s.data = filepath.Join(env.WorkDir, s.name)
	var err error
	if s.bin == "" {
		bin, err := Build(ctx, env.WorkDir)
		if err != nil {
			return err
		}
		s.bin = bin
	}
	common := func(role string) []string {
		args := []string{"--topic-prefix", s.name + "-", "--partitions", fmt.Sprint(env.Partitions),
			"--data-dir", filepath.Join(s.data, role), "--log-level", "warn", "--instance-id", s.name + "-" + role, "--session-timeout", "6s",
			"--default-policy", "none"} // the benchmark's calls are due at any hour; extra flags may set a policy
		return append(args, s.extra...)
	}
	if s.mode != Processes {
		if s.web, err = freeAddr(); err != nil {
			return err
		}
	}
	switch s.mode {
	case OneProcess:
		s.broker = env.KafkaBrokers
		s.procs = []*proc{{args: append([]string{"run", "--brokers", s.broker, "--http", s.web, "--pprof", s.web}, common("run")...)}}
	case Processes:
		s.broker = env.KafkaBrokers
		s.procs = []*proc{
			{args: append([]string{"scheduler", "--brokers", s.broker}, common("scheduler")...)},
			{args: append([]string{"dialer", "--brokers", s.broker}, common("dialer")...)},
		}
	case SchedulerOnly:
		s.broker = env.KafkaBrokers
		s.procs = []*proc{{args: append([]string{"scheduler", "--brokers", s.broker, "--http", s.web, "--pprof", s.web}, common("scheduler")...)}}
	case Embedded:
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		s.broker = addr
		s.procs = []*proc{{args: append([]string{"run", "--embedded-addr", addr, "--http", s.web, "--pprof", s.web}, common("run")...)}}
	}
	s.procs[0].args = append(s.procs[0].args, s.sched...)
	for _, p := range s.procs {
		p.log = filepath.Join(env.WorkDir, s.name+"-"+p.args[0]+".log")
	}
	for _, p := range s.procs {
		if err := s.launch(p); err != nil {
			return err
		}
	}
	if err := s.awaitTopics(ctx); err != nil {
		return err
	}
	if err := s.fillSuppressions(ctx); err != nil {
		return err
	}
	if s.web != "" && env.Log != nil {
		env.Log.Info("ivrsched started", "system", s.name, "web", "http://"+s.web) // /debug/pprof for profiles of a run
	}
	return nil
}

// Build compiles the ivrsched binary into dir once.
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "ivrsched")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	mod, err := harness.ModuleDir()
	if err != nil {
		return "", err
	}
	// Built in the project's own module (the bench module's parent), with
	// its pinned dependencies.
	if err := harness.GoBuild(ctx, filepath.Dir(mod), bin, "./cmd/ivrsched"); err != nil {
		return "", fmt.Errorf("build ivrsched: %w", err)
	}
	return bin, nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (s *System) launch(p *proc) error {
	proc, err := harness.StartProcess(Command(s.bin, p.args...), p.log)
	if err != nil {
		return fmt.Errorf("ivrsched %s: %w", p.args[0], err)
	}
	p.p = proc
	return nil
}

// awaitTopics waits until ivrsched created its topics.
func (s *System) awaitTopics(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := sarama.NewClient([]string{s.broker}, config())
		if err == nil {
			topics, _ := c.Topics()
			c.Close()
			last := s.topics.Results // the dialer's, created last
			if s.mode == SchedulerOnly {
				last = s.topics.Calls
			}
			if slices.Contains(topics, string(last)) && slices.Contains(topics, string(s.topics.Onboarding)) &&
				(s.suppressions == 0 || slices.Contains(topics, string(s.topics.Suppressions))) {
				return nil
			}
		}
		for _, p := range s.procs {
			select {
			case <-p.p.Exited():
				return fmt.Errorf("ivrsched %s exited during start; see its log in %s", p.args[0], s.env.WorkDir)
			default:
			}
		}
		if time.Now().After(deadline) {
			return errors.New("ivrsched topics not created within 60s")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func config() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V3_6_0_0
	c.Producer.Return.Successes = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Partitioner = sarama.NewCustomHashPartitioner(topology.Murmur2())
	c.Producer.Flush.Frequency = time.Millisecond
	c.Producer.Flush.Messages = 500
	// A starved single broker loses its partitions' leadership for seconds:
	// retry through that rather than fail the run.
	c.Producer.Retry.Max = 40
	c.Producer.Retry.Backoff = 250 * time.Millisecond
	c.ChannelBufferSize = 4096
	return c
}

// Schedule produces one onboarding command per task, as a producer would.
func (s *System) Schedule(ctx context.Context, tasks []harness.Task) error {
	now := timestamppb.Now()
	return s.produce(ctx, len(tasks), func(i int) (*sarama.ProducerMessage, error) {
		t := tasks[i]
		cmd := &ivrschedpb.Command{UserId: t.User, RequestedAt: now, Command: &ivrschedpb.Command_Onboard{Onboard: &ivrschedpb.Onboard{
			Phone: "+14155550100", TimeZone: s.zone,
			FollowUps: []*ivrschedpb.FollowUp{{TaskId: t.ID, When: &ivrschedpb.FollowUp_DueAt{DueAt: timestamppb.New(t.Due)},
				Action: &ivrschedpb.Action{IvrScript: "bench"}, Payload: t.Payload}},
		}}}
		b, err := proto.Marshal(cmd)
		if err != nil {
			return nil, err
		}
		return &sarama.ProducerMessage{Topic: string(s.topics.Onboarding), Key: sarama.StringEncoder(t.User), Value: sarama.ByteEncoder(b)}, nil
	})
}

// produce writes the n messages msg returns and waits for the broker to
// acknowledge each; the first error is returned.
func (s *System) produce(ctx context.Context, n int, msg func(i int) (*sarama.ProducerMessage, error)) error {
	p, err := sarama.NewAsyncProducer([]string{s.broker}, config())
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	errc := make(chan error, 1)
	go func() {
		var first error
		defer func() { errc <- first }()
		for range n {
			select {
			case _, ok := <-p.Successes():
				if !ok {
					return // closed on cancellation
				}
			case e, ok := <-p.Errors():
				if !ok {
					return
				}
				if first == nil {
					first = e.Err
				}
			}
		}
	}()
	for i := range n {
		m, err := msg(i)
		if err != nil {
			p.AsyncClose()
			return err
		}
		select {
		case p.Input() <- m:
		case <-ctx.Done():
			p.AsyncClose()
			return ctx.Err()
		}
	}
	err = <-errc
	p.AsyncClose()
	return err
}

// Observe consumes ivr-calls from the start: a fire is the first call
// published with a call id, as etf1's fire is the record on its target
// topic. A call published again after a crash carries the same call id (the
// dialer drops it), so it is the same fire; a second call id for one
// follow-up would count as a duplicate.
func (s *System) Observe(ctx context.Context, out chan<- harness.Fire) error {
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	return harness.ObserveTopic(ctx, []string{s.broker}, string(s.topics.Calls), out, func(m *sarama.ConsumerMessage) (harness.Fire, bool) {
		var c ivrschedpb.IVRCall
		if proto.Unmarshal(m.Value, &c) != nil {
			return harness.Fire{}, false
		}
		mu.Lock()
		defer mu.Unlock()
		if seen[c.GetCallId()] {
			return harness.Fire{}, false
		}
		seen[c.GetCallId()] = true
		return harness.Fire{ID: c.GetTaskId()}, true
	})
}

// ObservePlaced consumes ivr-results from the start: a placement is a call
// id's first result. The dialer publishes a call's result again when it
// replays the answer after a restart (at least once, with the same call
// id), which is not a second placement; a second call id for one follow-up
// would count as a duplicate, as in Observe, and a call dialed twice shows
// in the provider's requests, which the system tests count.
func (s *System) ObservePlaced(ctx context.Context, out chan<- harness.Fire) error {
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	return harness.ObserveTopic(ctx, []string{s.broker}, string(s.topics.Results), out, func(m *sarama.ConsumerMessage) (harness.Fire, bool) {
		var r ivrschedpb.CallResult
		if proto.Unmarshal(m.Value, &r) != nil {
			return harness.Fire{}, false
		}
		mu.Lock()
		defer mu.Unlock()
		if seen[r.GetCallId()] {
			return harness.Fire{}, false
		}
		seen[r.GetCallId()] = true
		return harness.Fire{ID: r.GetTaskId()}, true
	})
}

// PIDs are the ivrsched processes.
func (s *System) PIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := make([]*harness.Process, 0, len(s.procs)+1)
	for _, p := range s.procs {
		ps = append(ps, p.p)
	}
	if s.joiner != nil {
		ps = append(ps, s.joiner.p)
	}
	return harness.PIDs(ps...)
}

// Crash kills the scheduler process (or the single process) with SIGKILL.
func (s *System) Crash() error { return s.procs[0].p.Kill() }

// Recover starts the killed process again with the same flags.
func (s *System) Recover(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.launch(s.procs[0])
}

// Stop stops every process gracefully (SIGTERM), killing after 30 s.
func (s *System) Stop() error {
	var errs []error
	s.mu.Lock()
	procs := s.procs
	if s.joiner != nil {
		procs = append([]*proc{s.joiner}, procs...)
	}
	s.mu.Unlock()
	for _, p := range procs {
		if p.p != nil {
			errs = append(errs, p.p.Stop(30*time.Second))
		}
	}
	return errors.Join(errs...)
}

// Applied returns once the scheduler group has committed every onboarding
// record: all scheduled follow-ups are in its table.
func (s *System) Applied(ctx context.Context) error {
	return s.committed(ctx, string(s.topics.Scheduler), string(s.topics.Onboarding))
}

// Backlog is how many onboarding commands the scheduler has not committed.
func (s *System) Backlog(ctx context.Context) (int64, error) {
	client, admin, err := s.admin()
	if err != nil {
		return 0, err
	}
	defer client.Close()
	return backlog(client, admin, string(s.topics.Scheduler), string(s.topics.Onboarding))
}

// admin is a client of the broker and an admin on it; closing the client
// closes both.
func (s *System) admin() (sarama.Client, sarama.ClusterAdmin, error) {
	client, err := sarama.NewClient([]string{s.broker}, config())
	if err != nil {
		return nil, nil, err
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return client, admin, nil
}

// committed returns once group has committed every record of topic. A
// broker that does not answer, or answers that it does not lead a
// partition or coordinate the group (a starved single broker loses its
// leadership for seconds; a coordinator may still be loading offsets), is
// asked again for up to two minutes.
func (s *System) committed(ctx context.Context, group, topic string) error {
	client, admin, err := s.admin()
	if err != nil {
		return err
	}
	defer client.Close()
	var failing time.Time // since when every attempt failed
	for {
		done, err := isCommitted(client, admin, group, topic)
		switch {
		case err == nil:
			failing = time.Time{}
		case failing.IsZero():
			failing = time.Now()
		case time.Since(failing) > 2*time.Minute:
			return err
		}
		if done {
			return nil
		}
		if err != nil {
			_ = client.RefreshMetadata(topic)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// isCommitted reports whether group committed topic's end offsets.
func isCommitted(client sarama.Client, admin sarama.ClusterAdmin, group, topic string) (bool, error) {
	ends, done, err := offsets(client, admin, group, topic)
	if err != nil {
		return false, err
	}
	for p, end := range ends {
		if done[p] < end || done[p] < 0 {
			return false, nil
		}
	}
	return true, nil
}

// backlog is how many records of topic group has not committed.
func backlog(client sarama.Client, admin sarama.ClusterAdmin, group, topic string) (int64, error) {
	ends, done, err := offsets(client, admin, group, topic)
	if err != nil {
		return 0, err
	}
	var n int64
	for p, end := range ends {
		n += end - max(done[p], 0) // nothing committed (-1): from the start
	}
	return n, nil
}

// offsets are the end offsets of topic's partitions and the offsets group
// committed in them (-1: none).
func offsets(client sarama.Client, admin sarama.ClusterAdmin, group, topic string) (ends, done map[int32]int64, err error) {
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, nil, err
	}
	ends, done = map[int32]int64{}, map[int32]int64{}
	for _, p := range parts {
		if ends[p], err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			return nil, nil, err
		}
	}
	got, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if err != nil {
		return nil, nil, err
	}
	if got.Err != sarama.ErrNoError {
		return nil, nil, got.Err
	}
	for _, p := range parts {
		done[p] = -1
		if b := got.GetBlock(topic, p); b != nil {
			done[p] = b.Offset
		}
	}
	return ends, done, nil
}

// LiveHeapBytes is the heap `ivrsched run` (or the scheduler alone) keeps after a garbage
// collection, read from its runtime statistics on the web UI.
func (s *System) LiveHeapBytes(ctx context.Context) (int64, error) {
	if s.web == "" {
		return 0, errors.New("no web UI to read the heap from")
	}
	return harness.LiveHeap(ctx, "http://"+s.web+"/debug/pprof/heap?gc=1&debug=1")
}

// DiskBytes is the size of the local stores (and of the embedded broker's log).
func (s *System) DiskBytes() int64 { return harness.DirSize(s.data, "") }

// benchSuppressionKey is the do-not-call list's key of the benchmarked
// processes (they refuse to start without one); the list stays empty.
const benchSuppressionKey = "IVRSCHED_SUPPRESSION_KEY=ivrbench-suppression-key-0123456789abcdef"

// Command is exec.Command with the environment an ivrsched role needs.
func Command(bin string, args ...string) *exec.Cmd {
	c := exec.Command(bin, args...)
	c.Env = append(os.Environ(), benchSuppressionKey)
	return c
}
