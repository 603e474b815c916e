package kafkaclient

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
)

// ErrEarlierWriteFailed fails a write whose key's earlier write failed:
// it is not written, so a topic never has a later value of a key without
// the earlier ones.
var ErrEarlierWriteFailed = errors.New("an earlier write of the key failed")

// ErrProducerClosed fails a write emitted to a closed producer, or held
// there when it closed.
var ErrProducerClosed = errors.New("producer closed")

// closeWait bounds how long Close waits for the held writes to be sent
// (as long as Goka's producer waits for its own).
const closeWait = 60 * time.Second

// keyOrder is a goka.Producer that writes the records of one key (of one
// topic) in the order they were emitted, whatever Sarama does across a
// retry: a write is sent to the producer it wraps once the write of its key
// before it is acknowledged. Sarama does not keep that order itself: with
// one request in flight per broker and not idempotent, a batch it retries
// (a retriable refusal such as NOT_LEADER_FOR_PARTITION) may be written
// after the next batch of its partition (internal/kafkaclient's doc).
//
// A key with no write in flight, the steady state, costs one map lookup
// and one insert under a short lock when emitted, and one delete when
// acknowledged; nothing of it is allocated. A write of a key
// with one in flight is held (allocated) until that one's answer: on a
// success it is sent (by a goroutine of its own: the answer comes on the
// goroutine that reads Sarama's acknowledgements, which must not wait for
// Sarama's input); on a failure it fails too, with ErrEarlierWriteFailed,
// and so do the writes held behind it. If failKey, every later write of
// that key fails as well until Close (a processor: its partition fails
// and its input replays, in a producer built anew); else the key is
// written again once none of its writes is held (an emitter: its caller
// got the errors). Producers that share their keyOrders keep the order
// together: a write to one waits for the key's write sent by another.
//
// It relies on Goka's producer answering a success with its message and a
// failure with a *sarama.ProducerError that carries it: the key is read
// from there, so nothing per write is kept or allocated.
type keyOrder struct {
	*keyOrders
	inner  goka.Producer
	answer func(*sarama.ProducerMessage, error) // k.answered, bound once

	// Guarded by keyOrders.mu:
	ready   []*heldWrite // released, for the sender
	unsent  int          // held or ready
	closing bool
	closed  bool
	idle    chan struct{} // closed when unsent drops to 0 while closing

	wake    chan struct{} // the sender has ready writes
	stop    chan struct{}
	stopped chan struct{}
}

// keyOrders is the order of keys that one or more keyOrder producers keep
// together: the producers an emitter's builder makes (a reviving emitter
// replaces its producer while the old one's writes may be in flight).
type keyOrders struct {
	failKey bool

	mu     sync.Mutex
	keys   map[writeKey]keyState // keys with a write in flight (or failed, failKey)
	held   int                   // writes held, of all keys
	gaveUp bool                  // a Close gave up on a write's answer
}

func newKeyOrders(failKey bool) *keyOrders {
	return &keyOrders{failKey: failKey, keys: make(map[writeKey]keyState)}
}

type writeKey struct{ topic, key string }

// keyState is a key with a write in flight, by the producer it was sent
// to: the writes held behind it, or (failKey) the error that failed it.
type keyState struct {
	by   *keyOrder
	held []*heldWrite
	err  error
}

type heldWrite struct {
	to      *keyOrder // the producer it was emitted to
	key     writeKey
	value   []byte
	headers goka.Headers
	promise *goka.Promise
	finish  goka.PromiseFinisher
}

// newKeyOrder wraps inner, a producer of Goka's, keeping the order of
// keys with the other producers of orders.
func newKeyOrder(inner goka.Producer, orders *keyOrders) *keyOrder {
	k := &keyOrder{
		keyOrders: orders,
		inner:     inner,
		wake:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	k.answer = k.answered
	go k.sendReleased()
	return k
}

// Emit writes value under key to topic once the key's earlier writes are
// acknowledged.
func (k *keyOrder) Emit(topic, key string, value []byte) *goka.Promise {
	return k.EmitWithHeaders(topic, key, value, nil)
}

// EmitWithHeaders is Emit with headers.
func (k *keyOrder) EmitWithHeaders(topic, key string, value []byte, headers goka.Headers) *goka.Promise {
	wk := writeKey{topic, key}
	k.mu.Lock()
	if k.closing {
		k.mu.Unlock()
		return failed(fmt.Errorf("write to %s: %w", topic, ErrProducerClosed))
	}
	st, busy := k.keys[wk]
	if !busy {
		k.keys[wk] = keyState{by: k}
		k.mu.Unlock()
		return k.send(wk, value, headers)
	}
	if st.err != nil {
		k.mu.Unlock()
		return failed(fmt.Errorf("write to %s: %w: %w", topic, ErrEarlierWriteFailed, st.err))
	}
	w := &heldWrite{to: k, key: wk, value: value, headers: headers}
	w.promise, w.finish = goka.NewPromiseWithFinisher()
	st.held = append(st.held, w)
	k.keys[wk] = st
	k.held++
	k.unsent++
	k.mu.Unlock()
	return w.promise
}

// send hands a write whose key has no other in flight to the producer.
func (k *keyOrder) send(wk writeKey, value []byte, headers goka.Headers) *goka.Promise {
	return k.inner.EmitWithHeaders(wk.topic, wk.key, value, headers).ThenWithMessage(k.answer)
}

// answered takes the answer to a write k sent for a key with none other
// in flight, and releases or fails the write held next.
func (k *keyOrder) answered(msg *sarama.ProducerMessage, err error) {
	if msg == nil {
		var pe *sarama.ProducerError
		if !errors.As(err, &pe) || pe.Msg == nil {
			panic(fmt.Sprintf("kafkaclient: a producer's answer without its message: %v", err))
		}
		msg = pe.Msg
	}
	key, _ := msg.Key.(sarama.StringEncoder)
	wk := writeKey{msg.Topic, string(key)}
	k.mu.Lock()
	if err == nil && k.held == 0 && !k.gaveUp { // the steady state: wk is k's, nothing behind it
		delete(k.keys, wk)
		k.mu.Unlock()
		return
	}
	st, ok := k.keys[wk]
	if !ok || st.by != k || st.err != nil {
		k.mu.Unlock() // given up on at Close
		return
	}
	if len(st.held) == 0 {
		if err != nil && k.failKey {
			k.keys[wk] = keyState{by: k, err: err}
		} else {
			delete(k.keys, wk)
		}
		k.mu.Unlock()
		return
	}
	fails, woken := k.settle(wk, st, err)
	k.mu.Unlock()
	finishAll(fails)
	if woken != nil {
		select {
		case woken.wake <- struct{}{}:
		default:
		}
	}
}

// failure is a held write to fail with err.
type failure struct {
	w   *heldWrite
	err error
}

func finishAll(fails []failure) {
	for _, f := range fails {
		f.w.finish(nil, f.err)
	}
}

// settle ends the write of wk in flight (state st) with err, nil if it
// was acknowledged: the write held next is released to the producer it
// was emitted to (woken), or on err every held write fails. It returns
// the writes to fail once o.mu, held here, is unlocked.
func (o *keyOrders) settle(wk writeKey, st keyState, err error) (fails []failure, woken *keyOrder) {
	if err != nil {
		o.held -= len(st.held)
		for _, w := range st.held {
			w.to.sent(1)
			fails = append(fails, failure{w, fmt.Errorf("write to %s: %w: %w", wk.topic, ErrEarlierWriteFailed, err)})
		}
		if o.failKey {
			o.keys[wk] = keyState{by: st.by, err: err}
		} else {
			delete(o.keys, wk)
		}
		return fails, nil
	}
	if len(st.held) == 0 {
		delete(o.keys, wk)
		return nil, nil
	}
	next := st.held[0]
	o.held--
	st.held[0] = nil
	if st.held = st.held[1:]; len(st.held) == 0 {
		st.held = nil
	}
	st.by = next.to
	o.keys[wk] = st // next is in flight now
	// A closed producer has no held writes (Close took them): defensive.
	if next.to.closed {
		return []failure{{next, fmt.Errorf("write to %s: %w", wk.topic, ErrProducerClosed)}}, nil
	}
	next.to.ready = append(next.to.ready, next)
	return nil, next.to
}

// sent counts n of k's held writes as sent or failed; k.mu is held.
func (k *keyOrder) sent(n int) {
	k.unsent -= n
	if k.unsent == 0 && k.idle != nil {
		close(k.idle)
		k.idle = nil
	}
}

// sendReleased sends the released writes until stop.
func (k *keyOrder) sendReleased() {
	defer close(k.stopped)
	for {
		select {
		case <-k.wake:
		case <-k.stop:
			return
		}
		k.mu.Lock()
		ready := k.ready
		k.ready = nil
		k.mu.Unlock()
		for _, w := range ready {
			finish := w.finish
			k.send(w.key, w.value, w.headers).ThenWithMessage(func(msg *sarama.ProducerMessage, err error) { finish(msg, err) })
		}
		k.mu.Lock()
		k.sent(len(ready))
		k.mu.Unlock()
	}
}

// Close waits (up to closeWait) until none of its writes is held, fails
// those still held then, and closes the producer it wraps; a second Close
// does nothing. Goka closes a producer once every write's answer came (a
// processor's Cleanup, an emitter's Finish), so none is held then. A
// write it sent whose answer never came (Goka's producer stops waiting
// after 60 s) then counts as failed for the writes held behind it.
func (k *keyOrder) Close() error {
	k.mu.Lock()
	if k.closing {
		k.mu.Unlock()
		return nil
	}
	k.closing = true
	var idle chan struct{}
	if k.unsent > 0 {
		idle = make(chan struct{})
		k.idle = idle
	}
	k.mu.Unlock()
	if idle != nil {
		t := time.NewTimer(closeWait)
		select {
		case <-idle:
		case <-t.C:
		}
		t.Stop()
	}
	close(k.stop)
	<-k.stopped

	closed := func(w *heldWrite) failure {
		return failure{w, fmt.Errorf("write to %s: %w", w.key.topic, ErrProducerClosed)}
	}
	k.mu.Lock()
	k.closed = true
	var fails []failure
	for _, w := range k.ready {
		fails = append(fails, closed(w))
	}
	k.ready = nil
	for wk, st := range k.keys {
		if len(st.held) == 0 {
			continue
		}
		kept := make([]*heldWrite, 0, len(st.held))
		for _, w := range st.held {
			if w.to == k {
				fails = append(fails, closed(w))
			} else {
				kept = append(kept, w)
			}
		}
		if len(kept) < len(st.held) {
			k.held -= len(st.held) - len(kept)
			st.held = kept
			k.keys[wk] = st
		}
	}
	k.unsent = 0
	k.idle = nil
	k.mu.Unlock()
	finishAll(fails)

	err := k.inner.Close()

	k.mu.Lock()
	fails = nil
	for wk, st := range k.keys {
		if st.by == k && st.err == nil {
			k.gaveUp = true
			f, _ := k.settle(wk, st, fmt.Errorf("no answer before close: %w", ErrProducerClosed))
			fails = append(fails, f...)
		}
	}
	k.mu.Unlock()
	finishAll(fails)
	return err
}

// failed is a promise failed with err.
func failed(err error) *goka.Promise {
	p, finish := goka.NewPromiseWithFinisher()
	finish(nil, err)
	return p
}
