package ivrsched

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"

	"github.com/ivrsched/ivrsched/bench/harness"
	"github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/topology"
)

// What the retention phase (harness.RunRetention) needs of ivrsched: a
// second scheduler instance, a restart with another retention, the users
// removed, the tombstones written, and what opening each partition cost.

// Partition is the partition of a user's commands and state (murmur2, as
// every producer places them).
func (s *System) Partition(user string) int32 {
	return topology.Partition(user, int32(s.env.Partitions))
}

func (s *System) joinerID() string { return s.name + "-scheduler-joiner" }

// Join starts a second `ivrsched scheduler` with its own, empty, data
// directory and instance id: it joins the scheduler's group, and the group
// moves some partitions to it. Only with scheduler and dialer as separate
// processes.
func (s *System) Join(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mode != Processes {
		return errors.New("join: a second scheduler needs the Processes mode")
	}
	if s.joiner != nil {
		return errors.New("join: a second scheduler already runs")
	}
	s.joins++
	args := append([]string(nil), s.procs[0].args...) // the scheduler's flags, --retain included
	args = append(args, "--data-dir", filepath.Join(s.data, fmt.Sprintf("joiner-%d", s.joins)), "--instance-id", s.joinerID())
	p := &proc{args: args, log: filepath.Join(s.env.WorkDir, s.name+"-scheduler-joiner.log")}
	if err := s.launch(p); err != nil {
		return err
	}
	s.joiner = p
	return nil
}

// Leave stops the second scheduler gracefully (SIGTERM). A static member
// does not leave its group on a clean close: its partitions move back once
// its session times out.
func (s *System) Leave() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.joiner == nil {
		return nil
	}
	err := s.joiner.p.Stop(30 * time.Second)
	s.joiner = nil
	return err
}

// Joined is the partitions the second scheduler owns, from the group's
// description at the coordinator (asked again for up to 30 s while the
// coordinator is busy or the group rebalances).
func (s *System) Joined(ctx context.Context) ([]int32, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		parts, err := s.joined()
		if err == nil || time.Now().After(deadline) {
			return parts, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (s *System) joined() ([]int32, error) {
	admin, err := sarama.NewClusterAdmin([]string{s.broker}, config())
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	group := string(s.topics.Scheduler)
	ds, err := admin.DescribeConsumerGroups([]string{group})
	if err != nil {
		return nil, fmt.Errorf("describe group %s: %w", group, err)
	}
	for _, d := range ds {
		if d.Err != sarama.ErrNoError {
			return nil, fmt.Errorf("describe group %s: %w", group, d.Err)
		}
		if d.State != "Stable" {
			return nil, fmt.Errorf("group %s is %s", group, d.State)
		}
		for _, m := range d.Members {
			if m.GroupInstanceId == nil || *m.GroupInstanceId != s.joinerID() {
				continue
			}
			a, err := m.GetMemberAssignment()
			if err != nil {
				return nil, fmt.Errorf("assignment of %s: %w", s.joinerID(), err)
			}
			return a.Topics[string(s.topics.Onboarding)], nil
		}
	}
	return nil, fmt.Errorf("the second scheduler %s is not a member of group %s", s.joinerID(), group)
}

// SetRetention restarts the scheduler gracefully (SIGTERM) with --retain d.
func (s *System) SetRetention(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.procs[0]
	if err := p.p.Stop(60 * time.Second); err != nil {
		return fmt.Errorf("stop the scheduler: %w", err)
	}
	p.args = append(p.args, "--retain", d.String())
	return s.launch(p)
}

// ObserveExpired sends the users reported KIND_EXPIRED on followup-events
// (ID is the user id), from the topic's start.
func (s *System) ObserveExpired(ctx context.Context, out chan<- harness.Fire) error {
	return harness.ObserveTopic(ctx, []string{s.broker}, string(s.topics.Events), out, func(m *sarama.ConsumerMessage) (harness.Fire, bool) {
		var e ivrschedpb.ScheduleEvent
		if proto.Unmarshal(m.Value, &e) != nil || e.GetKind() != ivrschedpb.ScheduleEvent_KIND_EXPIRED {
			return harness.Fire{}, false
		}
		return harness.Fire{ID: e.GetUserId()}, true
	})
}

// Tombstones counts the deletes (records without a value) on the
// scheduler's and the dialer's table topics, once the dialer has consumed
// every report on followup-events (it deletes the users reported expired).
func (s *System) Tombstones(ctx context.Context) (map[string]int64, error) {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err := s.committed(wctx, string(s.topics.Dialer), string(s.topics.Events))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("the dialer has not consumed %s: %w", s.topics.Events, err)
	}
	client, err := sarama.NewClient([]string{s.broker}, config())
	if err != nil {
		return nil, err
	}
	defer client.Close()
	out := map[string]int64{}
	for _, t := range []string{string(s.topics.SchedulerTable()), string(s.topics.DialerTable())} {
		n, err := countTombstones(ctx, client, t)
		for try := 1; err != nil && try < 5 && ctx.Err() == nil; try++ { // a starved broker may not lead a partition for a while
			time.Sleep(2 * time.Second)
			_ = client.RefreshMetadata(t)
			n, err = countTombstones(ctx, client, t)
		}
		if err != nil {
			return nil, fmt.Errorf("tombstones of %s: %w", t, err)
		}
		out[t] = n
	}
	return out, nil
}

func countTombstones(ctx context.Context, client sarama.Client, topic string) (int64, error) {
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, p := range parts {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return 0, err
		}
		start, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return 0, err
		}
		if start >= end {
			continue
		}
		pc, err := c.ConsumePartition(topic, p, start)
		if err != nil {
			return 0, err
		}
		err = func() error {
			defer pc.Close()
			for {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case e := <-pc.Errors():
					return e
				case m := <-pc.Messages():
					if m.Value == nil {
						n++
					}
					if m.Offset >= end-1 {
						return nil
					}
				}
			}
		}()
		if err != nil {
			return 0, err
		}
	}
	return n, nil
}

// Opens is what opening each table partition cost the schedulers since t,
// read from their logs (the scheduler runs with --log-level info in the
// retention phase): the changelog records restored into the local store,
// and the due index built with one scan of it.
func (s *System) Opens(since time.Time) ([]harness.PartitionOpen, error) {
	s.mu.Lock()
	logs := map[string]string{"main": s.procs[0].log, "joiner": filepath.Join(s.env.WorkDir, s.name+"-scheduler-joiner.log")}
	s.mu.Unlock()
	var out []harness.PartitionOpen
	for inst, path := range logs {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		opens, err := parseOpens(bufio.NewScanner(f), inst, since)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, opens...)
	}
	return out, nil
}

var logAttr = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)

// parseOpens reads slog text lines: "local store recovered" (partition,
// records_restored, took) opens an entry; "due index built" (partition,
// keys, pending, took) completes that partition's last entry.
func parseOpens(sc *bufio.Scanner, instance string, since time.Time) ([]harness.PartitionOpen, error) {
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	var out []harness.PartitionOpen
	last := map[int32]int{} // partition → index in out
	for sc.Scan() {
		attrs := map[string]string{}
		for _, m := range logAttr.FindAllStringSubmatch(sc.Text(), -1) {
			v := m[2]
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
			attrs[m[1]] = v
		}
		msg := attrs["msg"]
		if msg != "local store recovered" && msg != "due index built" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, attrs["time"])
		if err != nil || at.Before(since) {
			continue
		}
		part, err := strconv.ParseInt(attrs["partition"], 10, 32)
		if err != nil {
			continue
		}
		took, _ := time.ParseDuration(attrs["took"])
		p := int32(part)
		switch msg {
		case "local store recovered":
			n, _ := strconv.ParseInt(attrs["records_restored"], 10, 64)
			out = append(out, harness.PartitionOpen{Instance: instance, Partition: p, At: at, Restored: n, RestoreSec: took.Seconds(), Keys: -1})
			last[p] = len(out) - 1
		case "due index built":
			i, ok := last[p]
			if !ok || out[i].Keys >= 0 {
				out = append(out, harness.PartitionOpen{Instance: instance, Partition: p, At: at, Restored: -1})
				i = len(out) - 1
			}
			out[i].Keys, _ = strconv.ParseInt(attrs["keys"], 10, 64)
			out[i].Pending, _ = strconv.ParseInt(attrs["pending"], 10, 64)
			out[i].BuildSec = took.Seconds()
		}
	}
	return out, sc.Err()
}

// Compact has the broker compact the scheduler's table now, as it would
// once the changelog's active segment rolled (Kafka's defaults roll it
// after 7 days or 1 GiB, and never clean the active segment): the topic
// rolls a segment every second and is cleaned at any dirty ratio until
// its size fell by a third and then stayed the same for 30 s (the log
// cleaner found nothing more to clean), or 5 minutes passed; then the
// topic gets its settings back.
// Values shadowed by later values or by tombstones go; tombstones stay
// (delete.retention.ms). A few follow-ups due now, one per partition, make
// the writes that roll the segments. It returns the table's bytes on the
// broker before and after.
func (s *System) Compact(ctx context.Context) (before, after int64, err error) {
	client, admin, err := s.admin()
	if err != nil {
		return 0, 0, err
	}
	defer client.Close()
	table := string(s.topics.SchedulerTable())
	start, err := topicBytes(client, admin, table)
	if err != nil {
		return 0, 0, err
	}
	for _, n := range start {
		before += n
	}
	set := func(op sarama.IncrementalAlterConfigsOperation, segmentMs, ratio string) error {
		v := func(s string) *string {
			if op == sarama.IncrementalAlterConfigsOperationDelete {
				return nil
			}
			return &s
		}
		return admin.IncrementalAlterConfig(sarama.TopicResource, table, map[string]sarama.IncrementalAlterConfigsEntry{
			"segment.ms":                {Operation: op, Value: v(segmentMs)},
			"min.cleanable.dirty.ratio": {Operation: op, Value: v(ratio)},
		}, false)
	}
	if err := set(sarama.IncrementalAlterConfigsOperationSet, "1000", "0.01"); err != nil {
		return before, 0, fmt.Errorf("compact %s: %w", table, err)
	}
	defer func() {
		if e := set(sarama.IncrementalAlterConfigsOperationDelete, "", ""); e != nil && err == nil {
			err = fmt.Errorf("restore the settings of %s: %w", table, e)
		}
	}()
	deadline := time.Now().Add(5 * time.Minute)
	last, since := before, time.Now() // the smallest size seen, and since when
	for i := 0; ; i++ {
		if i%10 == 0 { // every 10 s: writes that roll the segments
			if err := s.Schedule(ctx, s.onePerPartition(fmt.Sprintf("compact%d", i), time.Now())); err != nil {
				return before, 0, err
			}
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return before, 0, err
		}
		now, err := topicBytes(client, admin, table)
		if err != nil {
			return before, 0, err
		}
		after = 0
		for _, n := range now {
			after += n
		}
		if after < last {
			last, since = after, time.Now()
		}
		if after*3 <= before*2 && time.Since(since) >= 30*time.Second || time.Now().After(deadline) {
			return before, after, nil
		}
	}
}

// onePerPartition is one follow-up due at due for a user of each partition.
func (s *System) onePerPartition(id string, due time.Time) []harness.Task {
	var ts []harness.Task
	seen := map[int32]bool{}
	for i := 0; len(seen) < s.env.Partitions && i < 100000; i++ {
		u := fmt.Sprintf("user-%d", i)
		if p := s.Partition(u); !seen[p] {
			seen[p] = true
			ts = append(ts, harness.Task{ID: fmt.Sprintf("%s-%d", id, i), User: u, Due: due})
		}
	}
	return ts
}

// topicBytes is the size of each partition's log segments, on every broker.
func topicBytes(client sarama.Client, admin sarama.ClusterAdmin, topic string) (map[int32]int64, error) {
	var ids []int32
	for _, b := range client.Brokers() {
		ids = append(ids, b.ID())
	}
	dirs, err := admin.DescribeLogDirs(ids)
	if err != nil {
		return nil, fmt.Errorf("log dirs: %w", err)
	}
	n := map[int32]int64{}
	for _, ds := range dirs {
		for _, d := range ds {
			for _, t := range d.Topics {
				if t.Topic != topic {
					continue
				}
				for _, p := range t.Partitions {
					n[p.PartitionID] += p.Size
				}
			}
		}
	}
	return n, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
