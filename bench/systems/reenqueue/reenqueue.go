// Package reenqueue is the benchmark's baseline from the seeds: the Kafka
// "re-enqueue until due" consumer loop. Tasks are records on a delay topic
// that carry their due time; a consumer group reads the topic and produces
// each record that is due to a target topic, and each record that is not
// due to the delay topic again: at once (variant "immediate", the seeds'
// Spring Kafka listener) or after holding it for min(remaining, 60 s)
// (variant "hold60s", the seeds' kafkajs consumer). Every pending task thus
// costs broker traffic until it is due; Reproduced measures it.
//
// The loop runs as its own process, cmd/reenqueue-loop, built by Start.
package reenqueue

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/ivrsched/ivrsched/bench/harness"
)

const (
	benchModule = "github.com/ivrsched/ivrsched/bench"
	loopPackage = benchModule + "/cmd/reenqueue-loop"
	stopTimeout = 15 * time.Second
)

// System runs the re-enqueue loop as a harness.System.
type System struct {
	name    string
	variant string
	hold    time.Duration // the loop's --hold; 0 keeps its 60 s (tests shorten it)

	env         harness.Env
	brokers     []string
	delayTopic  string
	targetTopic string
	group       string
	bin         string
	logPath     string

	scheduled atomic.Int64 // records Schedule put on the delay topic

	mu   sync.Mutex
	proc *harness.Process // nil when not running
}

// New returns the loop as a harness.System named name; variant is
// "immediate" or "hold60s". The result is a *System.
func New(name, variant string) harness.System {
	return &System{name: name, variant: variant}
}

// Name is part of harness.System.
func (s *System) Name() string { return s.name }

// Topics returns the delay topic, the target topic and the consumer group.
func (s *System) Topics() (delay, target, group string) {
	return s.delayTopic, s.targetTopic, s.group
}

// Start creates the topics, builds the loop binary into env.WorkDir, starts
// it and returns once its consumer group is stable with the new process
// owning every partition of the delay topic.
func (s *System) Start(ctx context.Context, env harness.Env) error {
	switch s.variant {
	case Immediate, Hold60s:
	default:
		return fmt.Errorf("reenqueue: unknown variant %q", s.variant)
	}
	if env.Partitions <= 0 {
		env.Partitions = 1
	}
	if env.Log == nil {
		env.Log = slog.Default()
	}
	s.env = env
	s.brokers = splitBrokers(env.KafkaBrokers)
	s.delayTopic = s.name + "-delay"
	s.targetTopic = s.name + "-target"
	s.group = s.name + "-loop"
	s.bin = filepath.Join(env.WorkDir, "reenqueue-loop")
	s.logPath = filepath.Join(env.WorkDir, "reenqueue-loop.log")

	if err := buildLoop(ctx, s.bin); err != nil {
		return err
	}
	if err := s.createTopics(ctx); err != nil {
		return err
	}
	return s.Recover(ctx)
}

// Recover starts the loop process (again) and waits until it owns the
// delay topic's partitions. After Crash that takes up to the group session
// timeout (sarama's 10 s), until the coordinator expires the dead member.
func (s *System) Recover(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return errors.New("reenqueue: loop already running")
	}
	args := []string{
		"--brokers", strings.Join(s.brokers, ","),
		"--delay-topic", s.delayTopic,
		"--target-topic", s.targetTopic,
		"--group", s.group,
		"--variant", s.variant,
	}
	if s.hold > 0 {
		args = append(args, "--hold", s.hold.String())
	}
	proc, err := harness.StartProcess(exec.Command(s.bin, args...), s.logPath)
	if err != nil {
		return fmt.Errorf("reenqueue: loop: %w", err)
	}
	s.proc = proc

	clientID := fmt.Sprintf("reenqueue-loop-%d", proc.PID())
	if err := s.awaitOwner(ctx, clientID, proc.Exited()); err != nil {
		s.killLocked()
		return fmt.Errorf("%w\n--- end of %s ---\n%s", err, s.logPath, harness.Tail(s.logPath, 4096))
	}
	s.env.Log.Info("reenqueue: loop running", "system", s.name, "pid", proc.PID())
	return nil
}

// awaitOwner polls the group until it is Stable and clientID's member is
// assigned every partition of the delay topic.
func (s *System) awaitOwner(ctx context.Context, clientID string, exited <-chan struct{}) error {
	admin, err := sarama.NewClusterAdmin(s.brokers, saramaConfig("reenqueue-admin"))
	if err != nil {
		return fmt.Errorf("reenqueue: admin: %w", err)
	}
	defer admin.Close()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	state := "unknown"
	for {
		descs, err := admin.DescribeConsumerGroups([]string{s.group})
		if err == nil && len(descs) == 1 {
			d := descs[0]
			state = fmt.Sprintf("%s, %d members", d.State, len(d.Members))
			if d.State == "Stable" && ownsAll(d, clientID, s.delayTopic, s.env.Partitions) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reenqueue: loop %s did not join group %s (%s): %w", clientID, s.group, state, ctx.Err())
		case <-exited:
			return fmt.Errorf("reenqueue: loop %s exited during start-up", clientID)
		case <-ticker.C:
		}
	}
}

func ownsAll(d *sarama.GroupDescription, clientID, topic string, partitions int) bool {
	for _, m := range d.Members {
		if m.ClientId != clientID {
			continue
		}
		a, err := m.GetMemberAssignment()
		if err != nil || a == nil {
			return false
		}
		return len(a.Topics[topic]) == partitions
	}
	return false
}

// createTopics creates the delay and target topics (replication 1) and
// waits until every partition has a leader. Existing topics are an error:
// Reproduced counts every record of the delay topic.
func (s *System) createTopics(ctx context.Context) error {
	admin, err := sarama.NewClusterAdmin(s.brokers, saramaConfig("reenqueue-admin"))
	if err != nil {
		return fmt.Errorf("reenqueue: admin: %w", err)
	}
	defer admin.Close()
	for _, topic := range []string{s.delayTopic, s.targetTopic} {
		err := admin.CreateTopic(topic, &sarama.TopicDetail{
			NumPartitions:     int32(s.env.Partitions),
			ReplicationFactor: 1,
		}, false)
		if err != nil {
			return fmt.Errorf("reenqueue: create topic %s: %w", topic, err)
		}
	}
	for {
		metas, err := admin.DescribeTopics([]string{s.delayTopic, s.targetTopic})
		ready := err == nil && len(metas) == 2
		for _, m := range metas {
			if m.Err != sarama.ErrNoError || len(m.Partitions) != s.env.Partitions {
				ready = false
				break
			}
			for _, p := range m.Partitions {
				if p.Err != sarama.ErrNoError || p.Leader < 0 {
					ready = false
				}
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reenqueue: topics not ready: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Schedule produces one record per task to the delay topic (key: task id;
// due time in DueHeader and in the value) and returns once all are
// acknowledged.
func (s *System) Schedule(ctx context.Context, tasks []harness.Task) error {
	cfg := saramaConfig("reenqueue-schedule")
	producer, err := sarama.NewAsyncProducer(s.brokers, cfg)
	if err != nil {
		return fmt.Errorf("reenqueue: producer: %w", err)
	}
	var (
		acked, failed int64
		firstErr      error
		wg            sync.WaitGroup
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range producer.Successes() {
			acked++
		}
	}()
	go func() {
		defer wg.Done()
		for perr := range producer.Errors() {
			if failed == 0 {
				firstErr = perr.Err
			}
			failed++
		}
	}()
	var sendErr error
send:
	for _, t := range tasks {
		value, header, err := Message{
			ID:          t.ID,
			User:        t.User,
			TriggerTime: t.Due.UnixMilli(),
			DueUnixNano: t.Due.UnixNano(),
			Payload:     t.Payload,
		}.Encode()
		if err != nil {
			sendErr = err
			break
		}
		pm := &sarama.ProducerMessage{
			Topic:   s.delayTopic,
			Key:     sarama.StringEncoder(t.ID),
			Value:   sarama.ByteEncoder(value),
			Headers: []sarama.RecordHeader{header},
		}
		select {
		case producer.Input() <- pm:
		case <-ctx.Done():
			sendErr = ctx.Err()
			break send
		}
	}
	producer.AsyncClose() // flushes what was sent
	wg.Wait()
	s.scheduled.Add(acked)
	switch {
	case sendErr != nil:
		return fmt.Errorf("reenqueue: schedule: %w (%d of %d acknowledged)", sendErr, acked, len(tasks))
	case failed > 0:
		return fmt.Errorf("reenqueue: schedule: %d of %d records failed: %w", failed, len(tasks), firstErr)
	}
	return nil
}

// Observe consumes the target topic from the oldest offset and sends a Fire
// for every record (duplicates included) until ctx ends.
func (s *System) Observe(ctx context.Context, out chan<- harness.Fire) error {
	return harness.ObserveTopic(ctx, s.brokers, s.targetTopic, out, func(msg *sarama.ConsumerMessage) (harness.Fire, bool) {
		due, err := DueOf(msg.Headers, msg.Value)
		if err != nil {
			s.env.Log.Warn("reenqueue: fired record without due time", "partition", msg.Partition, "offset", msg.Offset)
		}
		return harness.Fire{ID: string(msg.Key), Due: due}, true
	})
}

// Reproduced returns how many records the loop has produced to the delay
// topic: the sum of the delay topic's end offsets minus the records that
// Schedule put there. It is the broker traffic the loop causes (duplicates
// after a crash included). brokers is a comma-separated bootstrap list.
func (s *System) Reproduced(ctx context.Context, brokers string) (int64, error) {
	end, err := TopicEnd(ctx, brokers, s.delayTopic)
	if err != nil {
		return 0, err
	}
	return end - s.scheduled.Load(), nil
}

// TopicEnd returns the sum of the end offsets of topic's partitions: the
// number of records ever produced to it (no transactions, no compaction).
func TopicEnd(ctx context.Context, brokers, topic string) (int64, error) {
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		client, err := sarama.NewClient(splitBrokers(brokers), saramaConfig("reenqueue-offsets"))
		if err != nil {
			done <- result{err: err}
			return
		}
		defer client.Close()
		parts, err := client.Partitions(topic)
		if err != nil {
			done <- result{err: err}
			return
		}
		var sum int64
		for _, p := range parts {
			off, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				done <- result{err: err}
				return
			}
			sum += off
		}
		done <- result{n: sum}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return 0, fmt.Errorf("reenqueue: end offsets of %s: %w", topic, r.err)
		}
		return r.n, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// PIDs is part of harness.System: the loop process.
func (s *System) PIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return harness.PIDs(s.proc)
}

// Crash kills the loop process with SIGKILL.
func (s *System) Crash() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return errors.New("reenqueue: loop not running")
	}
	s.killLocked()
	return nil
}

func (s *System) killLocked() {
	if s.proc != nil {
		_ = s.proc.Kill()
		s.proc = nil
	}
}

// Stop ends the loop: SIGTERM (it commits and prints its summary), SIGKILL
// after 15 s. Topics stay.
func (s *System) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return nil
	}
	err := s.proc.Stop(stopTimeout)
	s.proc = nil
	if err != nil {
		return fmt.Errorf("reenqueue: %w", err)
	}
	return nil
}

// Summaries returns the summary lines the loop printed when it stopped
// (one per clean stop), e.g. "reenqueue-loop summary: variant=immediate
// consumed=... reproduced=... fired=...".
func (s *System) Summaries() []string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "reenqueue-loop summary:") {
			lines = append(lines, sc.Text())
		}
	}
	return lines
}

// buildLoop builds cmd/reenqueue-loop to bin, in the bench module.
func buildLoop(ctx context.Context, bin string) error {
	dir, err := harness.ModuleDir()
	if err != nil {
		return fmt.Errorf("reenqueue: %w", err)
	}
	if err := harness.GoBuild(ctx, dir, bin, loopPackage); err != nil {
		return fmt.Errorf("reenqueue: %w", err)
	}
	return nil
}

func splitBrokers(s string) []string {
	var out []string
	for b := range strings.SplitSeq(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// tail returns the last n bytes of the file at path.
