package placement

import (
	"sync"
	"sync/atomic"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// The field number of DialerState.in_flight.
const inFlightField protowire.Number = 2

// HasInFlight reports whether a stored DialerState lists calls in flight
// (only values written before calls in flight were the uncommitted tail of
// ivr-calls do), reading only its top-level field tags. It is the Marker
// of the dialer's local stores (localstore.Stores.Mark): the users it
// accepts are found again when a partition comes without reading the
// table.
func HasInFlight(value []byte) bool {
	for len(value) > 0 {
		num, typ, n := protowire.ConsumeTag(value)
		if n < 0 {
			return false
		}
		if num == inFlightField && typ == protowire.BytesType {
			return true
		}
		m := protowire.ConsumeFieldValue(num, typ, value[n:])
		if m < 0 {
			return false
		}
		value = value[n+m:]
	}
	return false
}

// partition is one partition of the dialer this process owns, for one
// consumer group session: the calls the placer holds for it (queued or
// being placed, until their first status is recorded in their user's
// value, or their user is forgotten) and the commits of its ivr-calls
// records. A worker places a call only while its partition holds it: a call
// whose status came already (a provider's callback came first), a call of
// a forgotten user, or one whose partition went to another owner is not
// placed.
//
// A partition that comes in a session places nothing until the dialer has
// consumed its followup-events up to where they ended when the session
// claimed them: a Forget not committed before a crash or a rebalance is
// consumed again before any call (the calls submitted meanwhile wait, held,
// and the Forget drops its user's).
//
// Its methods are safe for concurrent use: the partition's goroutine
// holds and releases calls, the workers read, Goka's commit callbacks mark.
type partition struct {
	id      int32
	done    chan struct{}               // closed when the partition is given up
	commits *commits                    // of ivr-calls
	events  *commits                    // of followup-events: a Forget waits for the calls before it
	forgets *forgets                    // the recent Forgets
	session sarama.ConsumerGroupSession // the session commits marks on; nil: none

	mu    sync.Mutex
	users map[string]map[string]held // user id -> call id -> call held
	n     int
	loop  map[int64][]int64 // loop offset -> ivr-calls offsets its record releases
	gone  bool
	// calls is the session's claim of ivr-calls (nil: not seen yet).
	calls sarama.ConsumerGroupClaim
	// ready: followup-events are consumed up to eventsEnd (where they ended
	// when the session claimed them; -1: not known yet); eventsNext is one
	// past the last one consumed. Until then the calls submitted wait.
	ready      atomic.Bool // set once, under mu; read without it on every call
	eventsEnd  int64
	eventsNext int64
	waiting    []job
}

// held is a call the placer holds, and the offset of its ivr-calls record
// (-1: a call listed in flight by a value written before this version).
type held struct {
	call   *pb.IVRCall
	offset int64
}

// newPartition is a partition whose calls are placed at once without a
// session (nothing to catch up with: Goka's tester), and only once its
// followup-events are caught up with one.
func newPartition(id int32, c, events *commits, fs *forgets, session sarama.ConsumerGroupSession) *partition {
	p := &partition{id: id, done: make(chan struct{}), commits: c, events: events, forgets: fs, session: session,
		users: map[string]map[string]held{}, loop: map[int64][]int64{}, eventsEnd: -1, eventsNext: -1}
	p.ready.Store(session == nil)
	return p
}

// wait keeps j until the partition is ready; false if it is ready or given
// up (then j is to be queued, or refused).
func (p *partition) wait(j job) bool {
	if p.ready.Load() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ready.Load() || p.gone {
		return false
	}
	p.waiting = append(p.waiting, j)
	return true
}

// claimEvents takes the session's claim of followup-events, and returns
// the calls that waited if the partition became ready with it. A claim
// that starts at no offset of its own (the group never committed
// followup-events, and starts from their oldest) has nothing to catch up
// with: no earlier session of the group lost a Forget, short of one that
// died before its first commit.
func (p *partition) claimEvents(claim sarama.ConsumerGroupClaim) []job {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.eventsEnd = claim.HighWaterMarkOffset() // read when the claim started, or later
	if claim.InitialOffset() < 0 {
		p.eventsEnd = 0
	}
	p.eventsNext = max(p.eventsNext, claim.InitialOffset())
	return p.readyLocked()
}

// consumed tells that the followup-events record at offset was consumed,
// and returns the calls that waited if the partition became ready with it.
func (p *partition) consumed(offset int64) []job {
	if p.ready.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.eventsNext = max(p.eventsNext, offset+1)
	return p.readyLocked()
}

func (p *partition) readyLocked() []job {
	if p.ready.Load() || p.gone || p.eventsEnd < 0 || (p.eventsEnd > 0 && p.eventsNext < p.eventsEnd) {
		return nil
	}
	p.ready.Store(true)
	w := p.waiting
	p.waiting = nil
	return w
}

// claimCalls takes the session's claim of ivr-calls.
func (p *partition) claimCalls(claim sarama.ConsumerGroupClaim) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = claim
}

// callsCaughtUp says whether ivr-calls is consumed (its records registered)
// up to its end as the session's claim last saw it (its high watermark:
// read when the claim started, then by each fetch that brought records).
// Without a session (Goka's tester) there is no claim and nothing to wait
// for; with one, the claim is waited for.
func (p *partition) callsCaughtUp() bool {
	p.mu.Lock()
	claim := p.calls
	p.mu.Unlock()
	if claim == nil {
		return p.session == nil
	}
	return max(p.commits.registered(), claim.InitialOffset()) >= claim.HighWaterMarkOffset()
}

// hold holds a call; false if the partition holds its call id already.
func (p *partition) hold(user string, h held) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	calls := p.users[user]
	if _, ok := calls[h.call.GetCallId()]; ok {
		return false
	}
	if calls == nil {
		calls = map[string]held{}
		p.users[user] = calls
	}
	calls[h.call.GetCallId()] = h
	p.n++
	return true
}

// release stops holding a call, whose first status is being recorded by
// the loop record at loopOffset: its ivr-calls record is done once Goka
// commits that loop record.
func (p *partition) release(user, callID string, loopOffset int64) (held, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.users[user][callID]
	if !ok {
		return held{}, false
	}
	p.drop(user, callID)
	if h.offset >= 0 {
		p.loop[loopOffset] = append(p.loop[loopOffset], h.offset)
	}
	return h, true
}

// recorded returns the ivr-calls offsets released by the loop record at
// loopOffset, now committed by Goka.
func (p *partition) recorded(loopOffset int64) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	offs := p.loop[loopOffset]
	delete(p.loop, loopOffset)
	return offs
}

// forget stops holding a user's calls and returns them.
func (p *partition) forget(user string) []held {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []held
	for id, h := range p.users[user] {
		out = append(out, h)
		p.drop(user, id)
	}
	return out
}

// drop removes a held call. Called with mu held.
func (p *partition) drop(user, callID string) {
	delete(p.users[user], callID)
	if len(p.users[user]) == 0 {
		delete(p.users, user)
	}
	p.n--
}

// has says whether the partition is still owned and holds the call.
func (p *partition) has(user, callID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return false
	}
	_, ok := p.users[user][callID]
	return ok
}

// count is how many calls the partition holds.
func (p *partition) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// giveUp ends the partition: its calls are not placed here any more and
// its commits not marked, its recent Forgets are forgotten (those not
// committed are consumed again by its next owner). It returns the calls
// that waited for the partition to be ready.
func (p *partition) giveUp() []job {
	p.commits.unbind()
	p.events.unbind()
	p.forgets.close()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.gone {
		p.gone = true
		close(p.done)
	}
	w := p.waiting
	p.waiting = nil
	return w
}
