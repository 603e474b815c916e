package deadletter

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/IBM/sarama"
)

// HeaderReplays marks a record that `ivrsched dlq replay` re-produced: how
// many times it was replayed. It travels with the record, and into its dead
// letter if it fails again, so that a replay does not replay it once more
// (unless asked to: --max-replays).
const HeaderReplays = "ivrsched-dlq-replays"

// ErrNotReplayable is why a dead letter cannot be replayed.
var ErrNotReplayable = errors.New("not replayable")

// Replayable says whether e can be replayed to its source topic: it must
// not be truncated (DeadLetter.truncated: the record is not in it), nor an
// unreadable_state (its record met a stored value that does not
// decode and would meet it again, or the letter carries that value, from a
// tick), and the source must be a topic that is keyed by the dead letter's
// key (replayable, such as the onboarding and ivr-calls topics; not the
// scheduler's ticks).
func Replayable(e Entry, replayable map[string]bool) error {
	dl := e.Letter
	switch {
	case dl.GetReason() == string(ReasonUnreadableState):
		return fmt.Errorf("%w: %s: the user's stored value does not decode, and the record would meet it again (forget the user, then onboard them again)", ErrNotReplayable, dl.GetReason())
	case dl.GetTruncated():
		return fmt.Errorf("%w: the letter keeps only the size (%d bytes) and SHA-256 of the record's value, too large for a dead letter; the original is at %s/%d/%d while the topic retains it",
			ErrNotReplayable, dl.GetValueSize(), dl.GetSourceTopic(), dl.GetSourcePartition(), dl.GetSourceOffset())
	case !replayable[dl.GetSourceTopic()]:
		return fmt.Errorf("%w: its source %s is internal to ivrsched", ErrNotReplayable, dl.GetSourceTopic())
	}
	return nil
}

// Record returns the original record of e to produce again to its source
// topic: its key, value and headers, HeaderReplays set to one more than
// before. The partition is left to the producer's partitioner (murmur2 of
// the key: the user's partition, even for a record that was misrouted).
func Record(e Entry) *sarama.ProducerMessage {
	dl := e.Letter
	m := &sarama.ProducerMessage{
		Topic: dl.GetSourceTopic(),
		Key:   sarama.ByteEncoder(dl.GetKey()),
		Value: sarama.ByteEncoder(dl.GetValue()),
	}
	if dl.GetValue() == nil { // a tombstone stays one
		m.Value = nil
	}
	for _, h := range dl.GetHeaders() {
		if h.GetKey() != HeaderReplays {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(h.GetKey()), Value: h.GetValue()})
		}
	}
	m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(HeaderReplays), Value: []byte(strconv.Itoa(e.Replays + 1))})
	return m
}
