package explain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/topology"
)

// DefaultSince is how far back explain reads by default: the onboarding
// topic's retention, so that a request still kept is read.
const DefaultSince = 7 * 24 * time.Hour

// MaxSince is the furthest back explain reads (the dead-letter topics'
// retention).
const MaxSince = 30 * 24 * time.Hour

// Read reads the user's records from the user's partition of onboarding,
// followup-events, ivr-calls, ivr-results and the dead-letter topics of
// t: from the first offset whose timestamp is at or after since to the end
// each partition had when its read began. now is when the read happens.
// A topic that cannot be read (not created yet) is noted in its Source;
// Read fails only on a context's end or a broken connection. progress, if
// not nil, is told the records read so far and the records to read.
func Read(ctx context.Context, client sarama.Client, t topology.Topics, user string, since, now time.Time, progress func(read, total int64)) (Facts, error) {
	f := Facts{User: user, Since: since.UTC(), Read: now.UTC()}
	type span struct {
		src  int
		from int64
		end  int64
	}
	topics := []string{string(t.Onboarding), string(t.Events), string(t.Calls), string(t.Results), string(t.SchedulerDLQ), string(t.DialerDLQ)}
	var spans []span
	var total int64
	for _, topic := range topics {
		src := Source{Topic: topic, Partition: -1}
		parts, err := client.Partitions(topic)
		if err != nil || len(parts) == 0 {
			src.Error = fmt.Sprintf("not read: %v", cmpErr(err, "no partitions"))
			f.Sources = append(f.Sources, src)
			continue
		}
		p := topology.Partition(user, int32(len(parts)))
		src.Partition = p
		if topic == string(t.Onboarding) {
			f.Partition = p
		}
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return f, fmt.Errorf("end of %s/%d: %w", topic, p, err)
		}
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return f, fmt.Errorf("start of %s/%d: %w", topic, p, err)
		}
		from, err := client.GetOffset(topic, p, since.UnixMilli())
		if err != nil {
			return f, fmt.Errorf("offset of %s/%d at %s: %w", topic, p, since.UTC().Format(time.RFC3339), err)
		}
		if from < 0 { // nothing that recent
			from = end
		}
		from = max(from, oldest)
		src.From, src.To = from, end
		f.Sources = append(f.Sources, src)
		if from < end {
			spans = append(spans, span{len(f.Sources) - 1, from, end})
			total += end - from
		}
	}
	if len(spans) == 0 {
		return f, nil
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return f, fmt.Errorf("consumer: %w", err)
	}
	defer consumer.Close()
	var read int64
	for _, s := range spans {
		src := &f.Sources[s.src]
		pc, err := consumer.ConsumePartition(src.Topic, src.Partition, s.from)
		if err != nil {
			return f, fmt.Errorf("consume %s/%d: %w", src.Topic, src.Partition, err)
		}
		err = func() error {
			defer pc.Close()
			for off := s.from; off < s.end; {
				select {
				case m := <-pc.Messages():
					read += m.Offset + 1 - off
					off = m.Offset + 1
					src.Records++
					if string(m.Key) != user {
						continue
					}
					src.User++
					f.add(t, m)
				case err := <-pc.Errors():
					return fmt.Errorf("consume %s/%d: %w", src.Topic, src.Partition, err)
				case <-ctx.Done():
					return ctx.Err()
				}
				if progress != nil {
					progress(read, total)
				}
			}
			return nil
		}()
		if err != nil {
			return f, err
		}
	}
	return f, nil
}

func cmpErr(err error, otherwise string) string {
	if err != nil {
		return err.Error()
	}
	return otherwise
}

// unmarshal decodes a record's value.
func unmarshal(b []byte, m proto.Message) error {
	if len(b) == 0 {
		return errors.New("empty value")
	}
	return proto.Unmarshal(b, m)
}

// add decodes a record of the user by its topic.
func (f *Facts) add(t topology.Topics, m *sarama.ConsumerMessage) {
	p := Pos{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Time: m.Timestamp.UTC()}
	var err error
	switch m.Topic {
	case string(t.Onboarding):
		c := new(pb.Command)
		if err = unmarshal(m.Value, c); err == nil {
			f.Commands = append(f.Commands, Fact[*pb.Command]{p, c})
		}
	case string(t.Events):
		e := new(pb.ScheduleEvent)
		if err = unmarshal(m.Value, e); err == nil {
			f.Events = append(f.Events, Fact[*pb.ScheduleEvent]{p, e})
		}
	case string(t.Calls):
		c := new(pb.IVRCall)
		if err = unmarshal(m.Value, c); err == nil {
			f.Calls = append(f.Calls, Fact[*pb.IVRCall]{p, c})
		}
	case string(t.Results):
		r := new(pb.CallResult)
		if err = unmarshal(m.Value, r); err == nil {
			f.Results = append(f.Results, Fact[*pb.CallResult]{p, r})
		}
	case string(t.SchedulerDLQ), string(t.DialerDLQ):
		d := new(pb.DeadLetter)
		if err = unmarshal(m.Value, d); err == nil {
			f.DeadLetters = append(f.DeadLetters, Fact[*pb.DeadLetter]{p, d})
		}
	}
	if err != nil {
		f.Undecodable = append(f.Undecodable, p)
	}
}
