package localstore

import (
	"errors"
	"fmt"
	"hash"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/syndtr/goleveldb/leveldb"
)

// The overlay: a value set by a callback waits in memory, where reads see it
// first, until its changelog write is acknowledged; then the store's writer
// writes it to LevelDB in one batch with the changelog offset it reached, so
// that LevelDB is always a prefix of the changelog. Acknowledgements reach
// the stores through the processor's producer: Stores.Producer wraps the
// producer builder so that every acknowledged write to a table topic is
// handed to the store of its partition. A processor must use both
// Stores.Builder and Stores.Producer.
//
// Reads after the restore look in the overlay, then in the filter of the
// keys the store may hold (keys.go: a key not in it is absent), then in the
// values the store last read from LevelDB or wrote to it (recent.go), then
// in LevelDB: a callback mostly reads a key a callback of its partition read
// or wrote moments before, or one the store never held (a new user).

// maxUnacked bounds the writes a store keeps in memory waiting for the
// changelog's acknowledgement. The producer blocks long before this; reaching
// it means the processor's producer was not wrapped by Stores.Producer.
var maxUnacked = 1 << 20

// Producer wraps a producer builder so that the acknowledged writes to the
// table topics of these stores reach them.
func (s *Stores) Producer(build goka.ProducerBuilder) goka.ProducerBuilder {
	return func(brokers []string, clientID string, hasher func() hash.Hash32) (goka.Producer, error) {
		p, err := build(brokers, clientID, hasher)
		if err != nil {
			return nil, err
		}
		return &ackingProducer{Producer: p, stores: s}, nil
	}
}

// ackingProducer hands every acknowledged write to a table topic to the
// store of its partition. The stores are looked up when the write is
// emitted: Goka emits a table write right after setting it in the store,
// on the partition's goroutine, so the store open then is the one that
// holds the write (not a later store of the same partition).
type ackingProducer struct {
	goka.Producer
	stores *Stores
}

func (p *ackingProducer) Emit(topic, key string, value []byte) *goka.Promise {
	return p.EmitWithHeaders(topic, key, value, nil)
}

func (p *ackingProducer) EmitWithHeaders(topic, key string, value []byte, headers goka.Headers) *goka.Promise {
	parts := (*p.stores.open.Load())[topic]
	prom := p.Producer.EmitWithHeaders(topic, key, value, headers)
	if parts == nil {
		return prom
	}
	return prom.ThenWithMessage(func(msg *sarama.ProducerMessage, err error) {
		if err != nil || msg == nil {
			return // the processor fails on it; the write stays unacknowledged
		}
		if st := parts[msg.Partition]; st != nil {
			st.acked(key, value, msg.Offset)
		}
	})
}

type entry struct {
	value    []byte // nil: deleted
	inflight int    // writes of the key not yet written to LevelDB
}

type ack struct {
	key    string
	value  []byte // nil: a delete
	offset int64
}

// lookup returns the value a key has in the overlay, or else nothing if
// the filter of the keys says the store does not hold the key, or else the
// one LevelDB had when it was last read or written (recent), if it has one
// there, and the count of writes to pass to remember. During the restore
// it writes the restored records first.
func (s *store) lookup(key string) (value []byte, found bool, gen uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.recovered.Load() {
		return nil, false, 0, s.writeRestored()
	}
	if e := s.overlay[key]; e != nil {
		return e.value, true, 0, nil
	}
	if s.keys != nil && !s.keys.mayHave(key) {
		s.recent.put(key, nil) // absent from LevelDB too: the writer of a first write reads nothing
		return nil, true, 0, nil
	}
	value, found = s.recent.get(key)
	return value, found, s.gen, nil
}

// remember keeps what LevelDB had for key (nil: nothing) after the restore,
// unless a callback wrote since the lookup that came before the read (gen):
// the read may then have found LevelDB before or after that write reached
// it, and only the writer knows which value is the newer.
func (s *store) remember(key string, value []byte, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recovered.Load() && s.gen == gen { // closed: the budget is 0
		s.recent.put(key, value)
	}
}

func (s *store) Has(key string) (bool, error) {
	v, err := s.Get(key)
	return v != nil, err
}

func (s *store) Get(key string) ([]byte, error) {
	if s.db == nil {
		return nil, errNotOpen
	}
	v, found, gen, err := s.lookup(key)
	if found || err != nil {
		return v, err
	}
	v, err = s.db.Get([]byte(key), nil)
	if errors.Is(err, leveldb.ErrNotFound) {
		v, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("localstore: get %q in %s: %w", key, s.path, err)
	}
	s.remember(key, v, gen)
	return v, nil
}

func (s *store) Set(key string, value []byte) error {
	if value == nil {
		value = []byte{} // nil means deleted
	}
	return s.write(key, value)
}

func (s *store) Delete(key string) error {
	return s.write(key, nil)
}

// write restores a record (before MarkRecovered) or keeps a callback's write
// in the overlay until the changelog acknowledges it.
func (s *store) write(key string, value []byte) error {
	if s.db == nil {
		return errNotOpen
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.recovered.Load() {
		return s.restore(key, value)
	}
	if s.werr != nil {
		return s.werr
	}
	s.gen++ // the overlay shadows the key's kept value until the writer replaces it
	e := s.overlay[key]
	if e == nil {
		if len(s.overlay) >= maxUnacked {
			return fmt.Errorf("localstore: %d keys written in %s wait for the changelog's acknowledgement (is the processor's producer built by Stores.Producer?)", len(s.overlay), s.path)
		}
		e = new(entry)
		s.overlay[key] = e
	}
	if value != nil {
		s.addKey(key)
	}
	e.value = value
	e.inflight++
	return nil
}

// acked is called by the producer when the changelog acknowledged a write.
func (s *store) acked(key string, value []byte, offset int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.recovered.Load() {
		return
	}
	if e := s.overlay[key]; e == nil || e.inflight == 0 {
		s.log.Warn("changelog acknowledged a write the store did not make; ignored", "key", key, "offset", offset)
		return
	}
	s.acks = append(s.acks, ack{key: key, value: value, offset: offset})
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// writer writes acknowledged writes to LevelDB, each time all that waits in
// one batch with the offset reached, until Close.
func (s *store) writer() {
	defer close(s.written)
	var spare []ack
	b := new(leveldb.Batch)
	for {
		select {
		case <-s.kick:
		case <-s.stop:
			s.writeAcked(b, spare)
			return
		}
		spare = s.writeAcked(b, spare)
	}
}

// keptValues returns, by key, the values recent holds of the keys of acks:
// what LevelDB holds for them before acks are written, since the writer
// (which has written every earlier batch and put its values in recent) is
// the only one that writes LevelDB after the restore, and a read keeps what
// it found only if no callback wrote since (remember). The writer reads the
// others from LevelDB (oldValue). The callback that wrote a key mostly read
// it just before, so its old value is mostly there. Called with mu held.
func (s *store) keptValues(acks []ack) map[string][]byte {
	vals := make(map[string][]byte, len(acks))
	for _, a := range acks {
		if _, ok := vals[a.key]; ok {
			continue
		}
		if v, ok := s.recent.get(a.key); ok {
			vals[a.key] = v
		}
	}
	return vals
}

// writeAcked writes the acknowledged writes waiting, then drops them from the
// overlay (only then: a read finds a key in the overlay or in LevelDB). It
// returns a slice to collect the next ones in.
func (s *store) writeAcked(b *leveldb.Batch, spare []ack) []ack {
	s.mu.Lock()
	acks := s.acks
	if len(acks) == 0 {
		s.mu.Unlock()
		return spare // s.acks stays the store's
	}
	s.acks = spare[:0]
	offset := s.offset
	stamp := s.restoreStamp // an unchecked restore: not caught up now
	if s.complete {
		stamp = s.stores.now()
	}
	var vals map[string][]byte // with an index: the values b writes, by key, first what LevelDB has
	if s.stores.indexer != nil {
		vals = s.keptValues(acks)
	}
	s.mu.Unlock()
	b.Reset()
	var err error
	for _, a := range acks {
		var old []byte
		if vals != nil {
			if old, err = s.oldValue(a.key, vals); err != nil {
				break
			}
			vals[a.key] = a.value
		}
		s.put(b, a.key, old, a.value)
		offset = max(offset, a.offset)
	}
	if err == nil {
		s.putOffset(b, offset, stamp)
		err = s.db.Write(b, nil)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.werr == nil {
			s.werr = fmt.Errorf("localstore: write acknowledged records in %s: %w", s.path, err)
			s.log.Error("local store failed; it takes no more writes", "err", err)
		}
		return acks // the overlay keeps them
	}
	s.offset = offset
	s.wrote.Broadcast()
	for _, a := range acks {
		s.recent.put(a.key, a.value) // in order: a key's last write is kept
		if e := s.overlay[a.key]; e != nil {
			if e.inflight--; e.inflight <= 0 {
				delete(s.overlay, a.key)
			}
		}
	}
	clear(acks)
	return acks
}
