package deadletter

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// Entry is one dead letter read back from a dead-letter topic.
type Entry struct {
	// Where the dead letter is: its dead-letter topic, partition, offset.
	Topic     string
	Partition int32
	Offset    int64
	Letter    *pb.DeadLetter
	// Replays is how many times the original record had been replayed
	// when it was dead-lettered (its HeaderReplays; 0 for a record that
	// never was).
	Replays int
}

// Filter selects dead letters: of one reason (empty: any), dead-lettered
// at or after Since (zero: any time).
type Filter struct {
	Reason string
	Since  time.Time
}

func (f Filter) match(dl *pb.DeadLetter) bool {
	return (f.Reason == "" || dl.GetReason() == f.Reason) && (f.Since.IsZero() || !dl.GetAt().AsTime().Before(f.Since))
}

// Start says where to start reading a partition of a dead-letter topic: an
// offset, or sarama.OffsetOldest. Nil reads from the oldest record kept (or
// from Filter.Since).
type Start func(topic string, partition int32) (int64, error)

// Scan reads the dead-letter topics from the start (the later of start's
// offset and the first record at or after f.Since) to their end when Scan
// began, and calls fn for each dead letter f selects, in offset order per
// partition. progress, if not nil, is called after each record with the
// records read and the total to read. A record that does not decode as a
// DeadLetter is an error: dead-letter topics are ivrsched's own.
func Scan(ctx context.Context, client sarama.Client, topics []string, f Filter, start Start, progress func(read, total int64), fn func(Entry) error) error {
	type span struct {
		topic      string
		partition  int32
		from, last int64
	}
	var spans []span
	var total int64
	for _, topic := range topics {
		parts, err := client.Partitions(topic)
		if err != nil {
			return fmt.Errorf("partitions of %s: %w", topic, err)
		}
		for _, p := range parts {
			end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				return fmt.Errorf("end of %s/%d: %w", topic, p, err)
			}
			from, err := client.GetOffset(topic, p, sarama.OffsetOldest)
			if err != nil {
				return fmt.Errorf("start of %s/%d: %w", topic, p, err)
			}
			if !f.Since.IsZero() {
				at, err := client.GetOffset(topic, p, f.Since.UnixMilli())
				if err != nil {
					return fmt.Errorf("offset of %s/%d at %v: %w", topic, p, f.Since, err)
				}
				if at < 0 { // nothing that recent
					at = end
				}
				from = max(from, at)
			}
			if start != nil {
				o, err := start(topic, p)
				if err != nil {
					return err
				}
				from = max(from, o)
			}
			if from < end {
				spans = append(spans, span{topic, p, from, end - 1})
				total += end - from
			}
		}
	}
	if len(spans) == 0 {
		return nil
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer consumer.Close()
	var read int64
	for _, s := range spans {
		pc, err := consumer.ConsumePartition(s.topic, s.partition, s.from)
		if err != nil {
			return fmt.Errorf("consume %s/%d: %w", s.topic, s.partition, err)
		}
		err = func() error {
			defer pc.Close()
			for {
				var m *sarama.ConsumerMessage
				select {
				case <-ctx.Done():
					return ctx.Err()
				case cerr := <-pc.Errors():
					return fmt.Errorf("consume %s/%d: %w", s.topic, s.partition, cerr)
				case m = <-pc.Messages():
				}
				read++
				dl := new(pb.DeadLetter)
				if err := proto.Unmarshal(m.Value, dl); err != nil {
					return fmt.Errorf("%s/%d/%d is not a dead letter: %w", m.Topic, m.Partition, m.Offset, err)
				}
				if f.match(dl) {
					if err := fn(Entry{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Letter: dl, Replays: replays(dl)}); err != nil {
						return err
					}
				}
				if progress != nil {
					progress(read, total)
				}
				if m.Offset >= s.last {
					return nil
				}
			}
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

func replays(dl *pb.DeadLetter) int {
	for _, h := range dl.GetHeaders() {
		if h.GetKey() == HeaderReplays {
			n, _ := strconv.Atoi(string(h.GetValue()))
			return n
		}
	}
	return 0
}
