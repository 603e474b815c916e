package placement

import (
	"sync"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

// answered is the calls this process placed whose answer it sent to the
// loop topic and that no status of has reached the dialer here yet, per
// partition, across consumer group sessions. A session ends at every
// rebalance (and when the group's coordinator moves) and the next one
// consumes again the calls whose status is not recorded: a call answered
// in the ending session is then not placed again (its answer, on its way,
// releases it). It only ever stops a placement; it never records a call.
// An entry leaves when a status of the call reaches the dialer here or its
// user is forgotten; those of a partition that went to another process
// stay (at most the calls being placed when it went).
//
// Its methods are safe for concurrent use.
type answered struct {
	mu    sync.Mutex
	calls map[int32]map[string]map[string]*pb.IVRCall // partition -> user -> call id -> call
}

func (a *answered) add(part int32, c *pb.IVRCall) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.calls == nil {
		a.calls = map[int32]map[string]map[string]*pb.IVRCall{}
	}
	users := a.calls[part]
	if users == nil {
		users = map[string]map[string]*pb.IVRCall{}
		a.calls[part] = users
	}
	ids := users[c.GetUserId()]
	if ids == nil {
		ids = map[string]*pb.IVRCall{}
		users[c.GetUserId()] = ids
	}
	ids[c.GetCallId()] = c
}

func (a *answered) has(part int32, user, id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.calls[part][user][id]
	return ok
}

// take removes a call and returns it (nil if absent).
func (a *answered) take(part int32, user, id string) *pb.IVRCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.calls[part][user][id]
	if c != nil {
		delete(a.calls[part][user], id)
		if len(a.calls[part][user]) == 0 {
			delete(a.calls[part], user)
		}
	}
	return c
}

// forget removes a user's calls.
func (a *answered) forget(part int32, user string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.calls[part], user)
}
