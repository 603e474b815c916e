package suppress

import (
	"context"
	"fmt"

	"github.com/lovoo/goka"
	gokacodec "github.com/lovoo/goka/codec"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// Writing and reading the list from outside the roles: `ivrsched suppress`
// uses these, and so can an admin API or an opt-out handler.

// Write stores e under the record key hash (Key.Hash), or removes the entry
// (e nil: a tombstone). It creates the topic if need be.
func Write(ctx context.Context, k kafkaclient.Kafka, t topology.Topics, hash string, e *pb.Suppression) error {
	topic := t.Suppressions
	if err := topology.EnsureTopics(ctx, k, []topology.TopicSpec{spec(t)}); err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	var value []byte // nil: a tombstone
	if e != nil {
		var err error
		if value, err = proto.Marshal(e); err != nil {
			return fmt.Errorf("encode the entry: %w", err)
		}
	}
	em, err := goka.NewEmitter(k.Brokers, goka.Stream(topic), new(gokacodec.Bytes), k.EmitterOptions()...)
	if err != nil {
		return fmt.Errorf("produce to %s: %w", topic, err)
	}
	var msg any
	if value != nil {
		msg = value
	}
	err = em.EmitSync(hash, msg)
	if ferr := em.Finish(); err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("produce to %s: %w", topic, err)
	}
	return nil
}

// Entry is one stored entry: its record key and value (nil: the value does
// not decode).
type Entry struct {
	Hash  string
	Value *pb.Suppression
}

// ReadAll reads the topic to its end and returns its entries (tombstoned
// ones left out), in no particular order.
func ReadAll(ctx context.Context, k kafkaclient.Kafka, t topology.Topics) ([]Entry, error) {
	var out []Entry
	err := withView(ctx, k, t, func(v *goka.View) error {
		it, err := v.Iterator()
		if err != nil {
			return err
		}
		defer it.Release()
		for it.Next() {
			val, err := it.Value()
			if err != nil {
				return err
			}
			if b, _ := val.([]byte); b != nil {
				out = append(out, Entry{Hash: it.Key(), Value: decode(b)})
			}
		}
		return nil
	})
	return out, err
}

// Lookup reads the topic to its end and returns the entry stored under
// hash, or nil.
func Lookup(ctx context.Context, k kafkaclient.Kafka, t topology.Topics, hash string) (*Entry, error) {
	var out *Entry
	err := withView(ctx, k, t, func(v *goka.View) error {
		val, err := v.Get(hash)
		if b, _ := val.([]byte); err == nil && b != nil {
			out = &Entry{Hash: hash, Value: decode(b)}
		}
		return err
	})
	return out, err
}

// decode returns the entry's value, nil if it does not decode.
func decode(b []byte) *pb.Suppression {
	e := &pb.Suppression{}
	if proto.Unmarshal(b, e) != nil {
		return nil
	}
	return e
}

// withView runs fn on a view of the topic once it has read it to its end.
func withView(ctx context.Context, k kafkaclient.Kafka, t topology.Topics, fn func(*goka.View) error) error {
	topic := t.Suppressions
	if err := topology.EnsureTopics(ctx, k, []topology.TopicSpec{spec(t)}); err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	return kafkaclient.ReadView(ctx, k, goka.Table(topic), fn, goka.WithViewStorageBuilder(StorageBuilder()))
}

func spec(t topology.Topics) topology.TopicSpec {
	for _, s := range t.Specs() {
		if s.Name == string(t.Suppressions) {
			return s
		}
	}
	panic("topology: no spec for the suppression topic")
}
