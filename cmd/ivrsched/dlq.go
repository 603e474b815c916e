package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/redact"
)

const dlqUsage = "usage: ivrsched dlq list [--reason R] [--since T] | ivrsched dlq replay [--reason R] [--since T]  (see --help of each)"

// cmdDLQ lists and replays the dead letters of scheduler-dlq and dialer-dlq.
func cmdDLQ(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"want a subcommand; " + dlqUsage}
	}
	switch args[0] {
	case "list":
		return cmdDLQList(ctx, args[1:], stdout)
	case "replay":
		return cmdDLQReplay(ctx, args[1:], stdout)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, dlqUsage)
		return nil
	}
	return usageError{fmt.Sprintf("unknown subcommand %q; %s", args[0], dlqUsage)}
}

// dlqFlags select dead letters.
type dlqFlags struct {
	kafkaFlags
	reason string
	since  string
}

func (d *dlqFlags) register(fs *flag.FlagSet) {
	d.kafkaFlags.register(fs, defaultBrokers)
	fs.StringVar(&d.reason, "reason", "", "only dead letters of this reason, like invalid_phone (default: every reason)")
	fs.StringVar(&d.since, "since", "", "only dead letters written since: an RFC 3339 time or a duration back from now, like 2h (default: all kept)")
}

func (d *dlqFlags) filter(now time.Time) (deadletter.Filter, error) {
	f := deadletter.Filter{Reason: d.reason}
	if d.reason != "" && strings.TrimSpace(d.reason) != d.reason {
		return f, badFlag("reason", "%q has spaces; want a reason code like invalid_phone", d.reason)
	}
	if d.since != "" {
		if dur, err := time.ParseDuration(d.since); err == nil {
			if dur < 0 {
				return f, badFlag("since", "%v; want a duration >= 0 like 2h, or an RFC 3339 time", dur)
			}
			f.Since = now.Add(-dur)
		} else if t, err := time.Parse(time.RFC3339Nano, d.since); err == nil {
			f.Since = t
		} else {
			return f, badFlag("since", "%q; want an RFC 3339 time like 2026-12-01T09:30:00Z or a duration like 2h", d.since)
		}
	}
	return f, nil
}

// connect checks the selection flags and connects to the cluster.
func (d *dlqFlags) connect(ctx context.Context) (deadletter.Filter, sarama.Client, error) {
	f, err := d.filter(time.Now())
	if err != nil {
		return f, nil, err
	}
	cfg, err := d.kafka("ivrsched-dlq")
	if err != nil {
		return f, nil, err
	}
	client, err := cfg.Connect(ctx)
	return f, client, err
}

func (d *dlqFlags) dlqTopics() []string {
	t := d.topics()
	return []string{string(t.SchedulerDLQ), string(t.DialerDLQ)}
}

// dlqLine is one dead letter as `dlq list` prints it. Phone numbers in the
// detail are masked; the value is not printed (it is replayed as is).
type dlqLine struct {
	Reason  string    `json:"reason"`
	Detail  string    `json:"detail,omitempty"`
	Group   string    `json:"group"`
	Source  dlqSource `json:"source"`
	Key     string    `json:"key"`
	At      time.Time `json:"at"`
	Replays int       `json:"replays"`
	// Truncated: the record was too large for its dead letter, which keeps
	// only its value's size (ValueSize); the original is at Source.
	Truncated bool  `json:"truncated,omitempty"`
	ValueSize int64 `json:"value_size,omitempty"`
	// Where the dead letter itself is: topic/partition/offset.
	DeadLetter string `json:"dead_letter"`
}

type dlqSource struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Timestamp time.Time `json:"timestamp"`
}

func lineOf(e deadletter.Entry) dlqLine {
	dl := e.Letter
	return dlqLine{
		Reason: dl.GetReason(), Detail: redact.Text(dl.GetDetail()), Group: dl.GetGroup(),
		Source: dlqSource{Topic: dl.GetSourceTopic(), Partition: dl.GetSourcePartition(), Offset: dl.GetSourceOffset(),
			Timestamp: dl.GetSourceTimestamp().AsTime().UTC()},
		Key: string(dl.GetKey()), At: dl.GetAt().AsTime().UTC(), Replays: e.Replays,
		Truncated: dl.GetTruncated(), ValueSize: dl.GetValueSize(),
		DeadLetter: fmt.Sprintf("%s/%d/%d", e.Topic, e.Partition, e.Offset),
	}
}

func cmdDLQList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("dlq list", "Prints the dead letters of scheduler-dlq and dialer-dlq as JSON lines: reason, detail\n"+
		"(phone numbers masked), the rejecting group, the source record's topic, partition,\n"+
		"offset and timestamp, its key, when it was dead-lettered and how many times it had\n"+
		"been replayed, and whether it is truncated (the record too large to keep: read it\n"+
		"at its source). Reads to the end and exits.")
	var d dlqFlags
	d.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	f, client, err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer client.Close()
	enc := json.NewEncoder(stdout)
	return deadletter.Scan(ctx, client, d.dlqTopics(), f, nil, nil, func(e deadletter.Entry) error {
		return enc.Encode(lineOf(e))
	})
}

// replayGroup is the consumer group whose committed offsets say how far
// `dlq replay` of one reason (or of all) has gone, so that running it again
// replays only what was dead-lettered since.
func replayGroup(prefix, reason string) string {
	if reason == "" {
		reason = "all"
	}
	return prefix + "ivrsched-dlq-replay." + reason
}

func cmdDLQReplay(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("dlq replay", "Produces the records that were dead-lettered (key, value and headers) to their source\n"+
		"topic again, once the cause is fixed (a calling policy changed, say), each marked with\n"+
		"the header ivrsched-dlq-replays (times replayed). A replayed record that fails again is\n"+
		"dead-lettered with its mark and not replayed again (see --max-replays). Each reason's\n"+
		"progress is committed (group ivrsched-dlq-replay.<reason>): running it again replays\n"+
		"only what was dead-lettered since. A truncated dead letter is skipped (it does not\n"+
		"hold the record). Prints a JSON line per record replayed or skipped,\n"+
		"then a summary; shows progress on a terminal.")
	var d dlqFlags
	d.register(fs)
	maxReplays := fs.Int("max-replays", 1, "replay a record at most this many times in all")
	again := fs.Bool("again", false, "ignore the committed progress: replay what was replayed before too")
	dryRun := fs.Bool("dry-run", false, "print what would be replayed, produce nothing, commit nothing")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *maxReplays < 1 {
		return badFlag("max-replays", "%d; want 1 or more", *maxReplays)
	}
	f, client, err := d.connect(ctx)
	if err != nil {
		return err
	}
	defer client.Close()
	progressOf := &replayProgress{client: client, group: replayGroup(d.prefix, d.reason), next: map[string]map[int32]int64{}}
	start := func(topic string, p int32) (int64, error) {
		next, err := progressOf.fetch(topic, p)
		if err != nil || *again {
			return sarama.OffsetOldest, err
		}
		return next, nil
	}
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer producer.Close()
	t := d.topics()
	replayable := map[string]bool{string(t.Onboarding): true, string(t.Calls): true}
	prog := newProgress("dlq replay")
	enc := json.NewEncoder(stdout)
	type result struct {
		dlqLine
		Replayed bool   `json:"replayed"`
		Skipped  string `json:"skipped,omitempty"`
	}
	var replayed, skipped int
	err = deadletter.Scan(ctx, client, d.dlqTopics(), f, start, func(read, total int64) {
		prog.update(read, total, fmt.Sprintf("%d replayed, %d skipped", replayed, skipped))
	}, func(e deadletter.Entry) error {
		r := result{dlqLine: lineOf(e)}
		switch err := deadletter.Replayable(e, replayable); {
		case err != nil:
			r.Skipped = err.Error()
		case e.Replays >= *maxReplays:
			r.Skipped = fmt.Sprintf("replayed %d times already and failed again (--max-replays %d)", e.Replays, *maxReplays)
		case *dryRun:
			r.Skipped = "dry run"
		default:
			if _, _, err := producer.SendMessage(deadletter.Record(e)); err != nil {
				return fmt.Errorf("replay %s to %s: %w", r.DeadLetter, e.Letter.GetSourceTopic(), err)
			}
			r.Replayed = true
		}
		if r.Replayed {
			replayed++
		} else {
			skipped++
		}
		if !*dryRun {
			progressOf.mark(e.Topic, e.Partition, e.Offset+1)
		}
		return enc.Encode(r)
	})
	prog.done()
	if !*dryRun {
		// Commit what was replayed, even when a later record failed.
		if cerr := progressOf.commit(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "{\"replayed_total\":%d,\"skipped_total\":%d}\n", replayed, skipped)
	return nil
}

// replayProgress reads and commits the replay group's offsets with plain
// OffsetFetch and OffsetCommit requests (a group without members: nothing
// joins it).
type replayProgress struct {
	client sarama.Client
	group  string
	next   map[string]map[int32]int64
}

// fetch returns the next offset to replay of a partition, or
// sarama.OffsetOldest if none was committed.
func (r *replayProgress) fetch(topic string, p int32) (int64, error) {
	coord, err := r.client.Coordinator(r.group)
	if err != nil {
		return 0, fmt.Errorf("coordinator of %s: %w", r.group, err)
	}
	req := &sarama.OffsetFetchRequest{Version: 5, ConsumerGroup: r.group}
	req.AddPartition(topic, p)
	resp, err := coord.FetchOffset(req)
	if err != nil {
		return 0, fmt.Errorf("replay progress of %s/%d: %w", topic, p, err)
	}
	if errors.Is(resp.Err, sarama.ErrGroupIDNotFound) { // never committed (the embedded broker says so)
		return sarama.OffsetOldest, nil
	}
	if resp.Err != sarama.ErrNoError {
		return 0, fmt.Errorf("replay progress of %s/%d: %w", topic, p, resp.Err)
	}
	b := resp.GetBlock(topic, p)
	switch {
	case b == nil || b.Offset < 0 || b.Err == sarama.ErrUnknownTopicOrPartition:
		return sarama.OffsetOldest, nil
	case b.Err != sarama.ErrNoError:
		return 0, fmt.Errorf("replay progress of %s/%d: %w", topic, p, b.Err)
	}
	return b.Offset, nil
}

func (r *replayProgress) mark(topic string, p int32, next int64) {
	if r.next[topic] == nil {
		r.next[topic] = map[int32]int64{}
	}
	r.next[topic][p] = next
}

func (r *replayProgress) commit() error {
	if len(r.next) == 0 {
		return nil
	}
	coord, err := r.client.Coordinator(r.group)
	if err != nil {
		return fmt.Errorf("coordinator of %s: %w", r.group, err)
	}
	req := &sarama.OffsetCommitRequest{Version: 2, ConsumerGroup: r.group, ConsumerGroupGeneration: -1, RetentionTime: -1}
	for topic, ps := range r.next {
		for p, o := range ps {
			req.AddBlock(topic, p, o, 0, "")
		}
	}
	resp, err := coord.CommitOffset(req)
	if err != nil {
		return fmt.Errorf("commit replay progress: %w", err)
	}
	for topic, ps := range resp.Errors {
		for p, e := range ps {
			if e != sarama.ErrNoError {
				return fmt.Errorf("commit replay progress of %s/%d: %w", topic, p, e)
			}
		}
	}
	return nil
}
