package placement

import (
	"fmt"
	"sync"
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
// since. A value that lists calls in flight but does not decode names no
// call to place: it is counted (Stats.Unreadable) and logged with its user,
// and the partition comes all the same. The value is kept as it is; the
// dialer dead-letters the user's next call or status as unreadable_state
// (until a Forget erases it), and the admin API shows it. Failing the
// partition instead would fail it again at every attempt, for every user
// of the partition. Close gives the partition up: its calls still queued
// are not placed here (the next owner consumes them again).
//
// Goka calls MarkRecovered on the partition's goroutine, except when a
// revoke cut the restore off: then in a goroutine nothing waits for, which
// may run while Close does or after it. A partition closed before its
// MarkRecovered took it is therefore not taken: closed, checked with the
// taking under mu, says so.
type tracked struct {
	storage.Storage
	p    *Placer
	id   int32
	part atomic.Pointer[partition] // nil until recovered and after Close

	mu     sync.Mutex
	closed bool
}

func (s *tracked) MarkRecovered() error {
	if s.isClosed() {
		return nil
	}
	if err := s.Storage.MarkRecovered(); err != nil {
		return err
	}
	start := time.Now()
	calls, scanned, unreadable, err := s.inFlight()
	if err != nil {
		if s.isClosed() {
			return nil // the store was closed under the read
		}
		return fmt.Errorf("dialer partition %d: calls in flight: %w", s.id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	part := s.p.newPartition(s.id)
	s.part.Store(part)
	s.p.own(part)
	s.p.claimed(part)
	s.p.cfg.Logger.Info("dialer partition owned", "partition", s.id, "calls_in_flight", len(calls),
		"values_read", scanned, "values_unreadable", unreadable, "took", time.Since(start).Round(time.Millisecond))
	if len(calls) > 0 {
		s.p.resubmit(part, calls)
	}
	return nil
}

func (s *tracked) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// inFlight returns the partition's calls in flight, how many values it
// read and how many of those listed calls in flight but did not decode:
// with a marking store it reads only the users marked, else every value.
// An error is the store's.
func (s *tracked) inFlight() (calls []*pb.IVRCall, read, unreadable int, err error) {
	add := func(user string, raw []byte) {
		read++
		if !HasInFlight(raw) {
			return
		}
		st := &pb.DialerState{}
		if err := proto.Unmarshal(raw, st); err != nil {
			unreadable++
			s.p.Stats.Unreadable.Add(1)
			s.p.cfg.Logger.Error("a stored value lists calls in flight but does not decode: they are not placed again, and the user's calls and statuses are dead-lettered as unreadable_state until a Forget erases it",
				"partition", s.id, "user", user, "err", err)
			return
		}
		for _, c := range st.GetInFlight() {
			if c.GetUserId() == "" {
				c.UserId = user
			}
			calls = append(calls, c)
		}
	}
	if m, ok := s.Storage.(marking); ok {
		users, err := m.Marked()
		if err != nil {
			return nil, 0, 0, err
		}
		for _, u := range users {
			raw, err := s.Storage.Get(u)
			if err != nil {
				return nil, read, unreadable, err
			}
			add(u, raw)
		}
		return calls, read, unreadable, nil
	}
	it, err := s.Storage.Iterator()
	if err != nil {
		return nil, 0, 0, err
	}
	defer it.Release()
	for it.Next() {
		raw, err := it.Value()
		if err != nil {
			return nil, read, unreadable, err
		}
		add(string(it.Key()), raw)
	}
	return calls, read, unreadable, it.Err()
}

func (s *tracked) Close() error {
	s.mu.Lock()
	s.closed = true
	part := s.part.Swap(nil)
	s.mu.Unlock()
	if part != nil {
		s.p.disown(part)
	}
	return s.Storage.Close()
}
