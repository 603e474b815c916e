package placement

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lovoo/goka/storage"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// StorageBuilder wraps inner so that every partition of the dialer's table
// tells the placer which partitions this process owns, and the calls in
// flight that values written by earlier versions list. Other topics'
// storages are returned unwrapped.
func (p *Placer) StorageBuilder(inner storage.Builder) storage.Builder {
	return func(topic string, part int32) (storage.Storage, error) {
		st, err := inner(topic, part)
		if err != nil || topic != p.cfg.Table {
			return st, err
		}
		return &tracked{Storage: st, p: p, id: part}, nil
	}
}

// marking is a store that indexes the users with calls in flight
// (localstore with HasInFlight as its Marker).
type marking interface {
	Marked() ([]string, error)
}

// tracked is a partition of the dialer's table that tells the placer when
// it is owned.
//
// MarkRecovered (once Goka restored the partition, inside the setup of a
// consumer group session) makes the partition owned: its share of the
// calls per second is taken, and its ivr-calls commits are kept from then
// on. Values written by earlier versions may list calls in flight (new
// values never do: calls in flight are the uncommitted tail of ivr-calls,
// consumed again by the partition's next owner); MarkRecovered reads them
// and submits them again, with their call ids: they were recorded in flight
// before an upgrade, a crash or a rebalance and got no answer recorded
// since. Close gives the partition up: its calls still queued are not
// placed here (the next owner consumes them again).
//
// Goka calls MarkRecovered and Close on the partition's goroutine.
type tracked struct {
	storage.Storage
	p    *Placer
	id   int32
	part atomic.Pointer[partition] // nil until recovered and after Close
}

func (s *tracked) MarkRecovered() error {
	if err := s.Storage.MarkRecovered(); err != nil {
		return err
	}
	start := time.Now()
	calls, scanned, err := s.inFlight()
	if err != nil {
		return fmt.Errorf("dialer partition %d: calls in flight: %w", s.id, err)
	}
	part := s.p.newPartition(s.id)
	s.part.Store(part)
	s.p.own(part)
	s.p.claimed(part)
	s.p.cfg.Logger.Info("dialer partition owned", "partition", s.id, "calls_in_flight", len(calls),
		"values_read", scanned, "took", time.Since(start).Round(time.Millisecond))
	if len(calls) > 0 {
		s.p.resubmit(part, calls)
	}
	return nil
}

// inFlight returns the partition's calls in flight: with a marking store
// it reads only the users marked, else every value.
func (s *tracked) inFlight() (calls []*pb.IVRCall, read int, err error) {
	add := func(user string, raw []byte) error {
		read++
		if !HasInFlight(raw) {
			return nil
		}
		st := &pb.DialerState{}
		if err := proto.Unmarshal(raw, st); err != nil {
			return fmt.Errorf("user %q: %w", user, err)
		}
		for _, c := range st.GetInFlight() {
			if c.GetUserId() == "" {
				c.UserId = user
			}
			calls = append(calls, c)
		}
		return nil
	}
	if m, ok := s.Storage.(marking); ok {
		users, err := m.Marked()
		if err != nil {
			return nil, 0, err
		}
		for _, u := range users {
			raw, err := s.Storage.Get(u)
			if err != nil {
				return nil, read, err
			}
			if err := add(u, raw); err != nil {
				return nil, read, err
			}
		}
		return calls, read, nil
	}
	it, err := s.Storage.Iterator()
	if err != nil {
		return nil, 0, err
	}
	defer it.Release()
	for it.Next() {
		raw, err := it.Value()
		if err != nil {
			return nil, read, err
		}
		if err := add(string(it.Key()), raw); err != nil {
			return nil, read, err
		}
	}
	return calls, read, it.Err()
}

func (s *tracked) Close() error {
	if part := s.part.Swap(nil); part != nil {
		s.p.disown(part)
	}
	return s.Storage.Close()
}
