package placement

import (
	"fmt"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
)

// The field numbers of DialerState.in_flight and IVRCall.call_id.
const (
	inFlightField protowire.Number = 2
	callIDField   protowire.Number = 1
)

// HasInFlight reports whether a stored DialerState lists calls in flight,
// reading only its top-level field tags. It is the Marker of the dialer's
// local stores (localstore.Stores.Mark): the users it accepts are found
// again after a crash without reading the table.
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

// InFlightIDs returns the call ids a stored DialerState lists in flight,
// reading nothing else of it.
func InFlightIDs(value []byte) ([]string, error) {
	var ids []string
	for len(value) > 0 {
		num, typ, n := protowire.ConsumeTag(value)
		if n < 0 {
			return nil, fmt.Errorf("dialer state: %w", protowire.ParseError(n))
		}
		value = value[n:]
		if num != inFlightField || typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, value)
			if m < 0 {
				return nil, fmt.Errorf("dialer state: %w", protowire.ParseError(m))
			}
			value = value[m:]
			continue
		}
		call, m := protowire.ConsumeBytes(value)
		if m < 0 {
			return nil, fmt.Errorf("dialer state: %w", protowire.ParseError(m))
		}
		value = value[m:]
		id, err := callID(call)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// callID reads IVRCall.call_id off the wire (the last one, as proto does).
func callID(call []byte) (string, error) {
	var id string
	for len(call) > 0 {
		num, typ, n := protowire.ConsumeTag(call)
		if n < 0 {
			return "", fmt.Errorf("dialer state: call: %w", protowire.ParseError(n))
		}
		call = call[n:]
		if num == callIDField && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(call)
			if m < 0 {
				return "", fmt.Errorf("dialer state: call id: %w", protowire.ParseError(m))
			}
			id, call = string(v), call[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, call)
		if m < 0 {
			return "", fmt.Errorf("dialer state: call: %w", protowire.ParseError(m))
		}
		call = call[m:]
	}
	return id, nil
}

// partition is the calls in flight of one table partition this process
// owns, kept current by the partition's storage (every write of a user's
// value sets the user's ids). A worker places a call only while its
// partition lists it: a call the dialer answered, dropped (the user was
// forgotten) or whose partition went to another owner is not placed.
//
// Its methods are safe for concurrent use: the partition's goroutine
// writes, the workers read.
type partition struct {
	id   int32
	done chan struct{} // closed when the partition is given up

	mu    sync.Mutex
	users map[string][]string // user id -> call ids in flight
	gone  bool
}

func newPartition(id int32) *partition {
	return &partition{id: id, done: make(chan struct{}), users: map[string][]string{}}
}

func (p *partition) set(user string, ids []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(ids) == 0 {
		delete(p.users, user)
		return
	}
	p.users[user] = ids
}

// has says whether the partition is still owned and lists the call in flight.
func (p *partition) has(user, callID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gone {
		return false
	}
	for _, id := range p.users[user] {
		if id == callID {
			return true
		}
	}
	return false
}

// count is how many calls the partition lists in flight.
func (p *partition) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, ids := range p.users {
		n += len(ids)
	}
	return n
}

func (p *partition) giveUp() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.gone {
		p.gone = true
		close(p.done)
	}
}
