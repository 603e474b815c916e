package kafkaclient

import (
	"sync"

	"github.com/IBM/sarama"
)

// sessionOrder keeps one session's commits in order: per claimed partition
// of each input (but the topics a keeper orders itself, OrderKeeper), the
// offsets handed to Goka, in the order Goka got them, and which of them
// Goka marked. A partition is marked on Sarama's session up to the first
// offset handed over and not marked (one past the last of the marked run
// before it), so offset gaps (a compacted topic) do not matter: only
// records Goka got count.
//
// The partitions are known at Setup (the session's claims), so the map is
// only read afterwards. Once the session ends (end), nothing more is
// marked on it: a mark that comes later (an acknowledgement Goka stopped
// waiting for) is dropped, and the next session consumes that record again.
type sessionOrder struct {
	sess  sarama.ConsumerGroupSession
	parts map[topicPartition]*partitionOrder

	mu    sync.Mutex // guards ended for the marks of topics not kept here
	ended bool
}

type topicPartition struct {
	topic string
	part  int32
}

func newSessionOrder(sess sarama.ConsumerGroupSession, keeper CommitKeeper) *sessionOrder {
	ordered, _ := keeper.(OrderKeeper)
	o := &sessionOrder{sess: sess, parts: map[topicPartition]*partitionOrder{}}
	for topic, parts := range sess.Claims() {
		if ordered != nil && ordered.KeepsOrder(topic) {
			continue
		}
		for _, p := range parts {
			o.parts[topicPartition{topic, p}] = &partitionOrder{sess: sess, topic: topic, part: p}
		}
	}
	return o
}

// consume runs Goka's ConsumeClaim (run) on a claim whose records are
// registered, in order, as they are handed over; a claim of a topic that is
// not kept here is handed over as it is.
func (o *sessionOrder) consume(c sarama.ConsumerGroupClaim, run func(sarama.ConsumerGroupClaim) error) error {
	var p *partitionOrder
	if o != nil {
		p = o.parts[topicPartition{c.Topic(), c.Partition()}]
	}
	if p == nil {
		return run(c)
	}
	out := make(chan *sarama.ConsumerMessage, handOverBuffer)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		defer close(out)
		in := c.Messages()
		for {
			select {
			case msg, ok := <-in:
				if !ok {
					return
				}
				p.handed(msg.Offset)
				select {
				case out <- msg:
				case <-stop:
					return
				}
			case <-stop:
				return
			}
		}
	}()
	err := run(orderedClaim{ConsumerGroupClaim: c, out: out})
	close(stop)
	<-stopped
	return err
}

// handOverBuffer is how many records may wait between Sarama's claim and
// Goka's: a few, so that a busy partition is handed over in runs.
const handOverBuffer = 64

// orderedClaim is a claim whose records come through the session's order.
type orderedClaim struct {
	sarama.ConsumerGroupClaim
	out chan *sarama.ConsumerMessage
}

func (c orderedClaim) Messages() <-chan *sarama.ConsumerMessage { return c.out }

// mark takes Goka's mark of next on a partition of topic. A partition not
// kept here (a topic its keeper orders itself) is marked at once.
func (o *sessionOrder) mark(topic string, part int32, next int64, metadata string) {
	if p := o.parts[topicPartition{topic, part}]; p != nil {
		p.marked(next-1, metadata)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.ended {
		o.sess.MarkOffset(topic, part, next, metadata)
	}
}

// end stops the marks: once it returns, nothing is marked on the session.
func (o *sessionOrder) end() {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.ended = true
	o.mu.Unlock()
	for _, p := range o.parts {
		p.mu.Lock()
		p.ended = true
		p.mu.Unlock()
	}
}

// partitionOrder is one partition's records handed to Goka and not yet
// committed: a ring of offsets in the order handed over (increasing), each
// with whether Goka marked it. It grows to the records in flight and is
// reused, so the steady state allocates nothing.
type partitionOrder struct {
	sess  sarama.ConsumerGroupSession
	topic string
	part  int32

	mu    sync.Mutex
	ring  []handed // len is a power of two (or 0)
	head  int      // index in ring of the oldest record
	n     int      // records in ring
	ended bool
}

type handed struct {
	offset int64
	marked bool
}

// handed registers the record at offset as handed to Goka (after every
// record handed before it).
func (p *partitionOrder) handed(offset int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == len(p.ring) {
		p.grow()
	}
	p.ring[(p.head+p.n)&(len(p.ring)-1)] = handed{offset: offset}
	p.n++
}

func (p *partitionOrder) grow() {
	ring := make([]handed, max(64, 2*len(p.ring)))
	for i := range p.n {
		ring[i] = p.ring[(p.head+i)&(len(p.ring)-1)]
	}
	p.ring, p.head = ring, 0
}

// at is the i-th oldest record.
func (p *partitionOrder) at(i int) *handed { return &p.ring[(p.head+i)&(len(p.ring)-1)] }

// marked takes Goka's mark of the record at offset, and marks the session
// up to the first record not marked if that moved. An offset not handed
// over (or already committed) is ignored.
func (p *partitionOrder) marked(offset int64, metadata string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended || p.n == 0 {
		return
	}
	// Binary search: the offsets increase from the oldest.
	lo, hi := 0, p.n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if p.at(mid).offset < offset {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == p.n || p.at(lo).offset != offset {
		return
	}
	p.at(lo).marked = true
	if lo != 0 {
		return
	}
	last := offset
	for p.n > 0 && p.at(0).marked {
		last = p.at(0).offset
		p.head = (p.head + 1) & (len(p.ring) - 1)
		p.n--
	}
	p.sess.MarkOffset(p.topic, p.part, last+1, metadata)
}
