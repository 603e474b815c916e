package localstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// A store trusts its restore, and the changelog it is restored from, only
// as far as it can check them against where the changelog ended when the
// store opened (changelogEnd, read through the stores' Kafka connection,
// ReadChangelog):
//
//   - Goka 1.1.16 calls MarkRecovered also when a revoke cut the restore
//     off (PartitionTable.load takes the ended context for the end of
//     loadMessages, then markRecovered runs MarkRecovered in a goroutine
//     nothing waits for, possibly after Close). A store is stamped caught
//     up only when its restore reached the high-water mark read at open;
//     else MarkRecovered fails, and after Close it does nothing.
//   - A store whose offset is at or past the high-water mark (its last
//     record is beyond the changelog's end: the topic was recreated, or an
//     unclean leader election truncated it), or whose changelog's topic ID
//     differs from the one it recorded (recreated), is wiped and restored.
//     Goka would take such a store as restored, restore nothing, and fail
//     at every start on an empty changelog. A store at the high-water mark
//     minus one holds the changelog's last record: the clean case.
//
// Without a Kafka connection, or when the read fails, the end is not
// known: the store is not checked and is never stamped caught up.

// changelogEnd is where a store's changelog began and ended when the store
// opened, and its topic ID.
type changelogEnd struct {
	oldest, hwm int64     // hwm < 0: not known
	id          string    // "": not known (a broker before Kafka 2.8)
	at          time.Time // when it was read
}

var unknownEnd = changelogEnd{hwm: -1}

func (e changelogEnd) known() bool { return e.hwm >= 0 }

// errNoKafka: the stores read no changelog (no ReadChangelog).
var errNoKafka = errors.New("the stores have no Kafka connection")

// end reads where the changelog of a store ends.
func (s *Stores) end(topic string, partition int32) (changelogEnd, error) {
	if s.readEnd != nil {
		return s.readEnd(topic, partition)
	}
	r := s.changelog
	if r == nil {
		return unknownEnd, errNoKafka
	}
	client, err := r.get()
	if err != nil {
		return unknownEnd, err
	}
	e := changelogEnd{at: s.now()}
	if e.id, err = topicID(client, r.cfg.Version, topic, partition); err != nil {
		return unknownEnd, err
	}
	if e.oldest, err = client.GetOffset(topic, partition, sarama.OffsetOldest); err != nil {
		return unknownEnd, fmt.Errorf("oldest offset: %w", err)
	}
	if e.hwm, err = client.GetOffset(topic, partition, sarama.OffsetNewest); err != nil {
		return unknownEnd, fmt.Errorf("high-water mark: %w", err)
	}
	return e, nil
}

// topicID asks the partition's leader for the topic's ID ("" from a broker
// that has none).
func topicID(client sarama.Client, version sarama.KafkaVersion, topic string, partition int32) (string, error) {
	leader, err := client.Leader(topic, partition)
	if err != nil {
		return "", fmt.Errorf("leader: %w", err)
	}
	resp, err := leader.GetMetadata(sarama.NewMetadataRequest(version, []string{topic}))
	if err != nil {
		return "", fmt.Errorf("topic ID: %w", err)
	}
	for _, t := range resp.Topics {
		if t.Name != topic {
			continue
		}
		if !errors.Is(t.Err, sarama.ErrNoError) {
			return "", fmt.Errorf("topic ID: %w", t.Err)
		}
		if t.Uuid == (sarama.Uuid{}) {
			return "", nil
		}
		return t.Uuid.String(), nil
	}
	return "", fmt.Errorf("topic ID: no metadata for %s", topic)
}

// readEnd reads the end of the store's changelog at open; a failure leaves
// it unknown.
func (s *store) readEnd() {
	e, err := s.stores.end(s.topic, s.partition)
	if err != nil && !errors.Is(err, errNoKafka) && !errors.Is(err, context.Canceled) { // not: no Kafka, or the process stops
		s.log.Warn("changelog's end unknown: the store is not checked against it, and not stamped caught up", "err", err)
	}
	s.end, s.topicID = e, e.id
}

// untrusted says why a store holding offset, recorded for the topic ID id,
// cannot be reused against the changelog's end ("": it can).
func (s *store) untrusted(offset int64, id string) string {
	switch {
	case s.end.known() && offset >= s.end.hwm:
		return fmt.Sprintf("the store's offset %d is at or past its changelog's high-water mark %d (the topic was recreated or truncated)", offset, s.end.hwm)
	case id != "" && s.end.id != "" && id != s.end.id:
		return fmt.Sprintf("the changelog's topic ID is %s, the store's was %s (the topic was recreated)", s.end.id, id)
	}
	return ""
}

// reachedEnd says whether the restore reached the changelog's end read at
// open: its last record (when the changelog has any). Called with mu held.
func (s *store) reachedEnd() bool {
	return s.end.known() && (s.offset >= s.end.hwm-1 || s.end.oldest >= s.end.hwm)
}
