package punctuation

import (
	"sync"
	"time"

	"github.com/google/btree"
)

// Due is a user with at least one follow-up due, as handed out by TakeDue.
type Due struct {
	User string
	At   time.Time // the user's earliest due time
}

type entry struct {
	due  int64 // unix nanoseconds
	user string
}

func less(a, b entry) bool {
	if a.due != b.due {
		return a.due < b.due
	}
	return a.user < b.user
}

type lease struct {
	user     string
	deadline int64
}

// Index is the due index of one partition of the scheduler table: for every
// user with pending follow-ups, the earliest due time. It mirrors the table
// exactly (the storage wrapper feeds it every Set and Delete, recovery
// included) and answers "what is due now" at a cost proportional to the
// answer.
//
// A user handed out by TakeDue is leased: it is not offered again until the
// lease ends (visibility timeout) or the user's table value changes, so a
// burst of due users is not re-sent by every tick while their fire messages
// are in flight.
//
// Index is safe for concurrent use: the partition goroutine writes it, the
// punctuator reads it.
type Index struct {
	mu      sync.Mutex
	pending map[string]int64         // user → earliest due; what the table holds
	ready   *btree.BTreeG[entry]     // pending users not leased, by due time
	leased  map[string]int64         // user → lease deadline
	leases  []lease                  // leases in the order given (deadlines ascend)
	changed func(earliest time.Time) // told when the earliest due time may have moved earlier
}

// NewIndex returns an empty index. changed, if not nil, is called (without
// the index lock held) when an update makes a user due earlier than before.
func NewIndex(changed func(earliest time.Time)) *Index {
	return &Index{
		pending: make(map[string]int64),
		ready:   btree.NewG(32, less),
		leased:  make(map[string]int64),
		changed: changed,
	}
}

// Update records the user's earliest due time as the table now holds it;
// ok=false means the user has nothing pending (or no value at all).
func (x *Index) Update(user string, due time.Time, ok bool) {
	x.mu.Lock()
	old, had := x.pending[user]
	if had {
		x.ready.Delete(entry{old, user})
		delete(x.leased, user)
	}
	var notify bool
	if ok {
		d := due.UnixNano()
		x.pending[user] = d
		x.ready.ReplaceOrInsert(entry{d, user})
		min, _ := x.ready.Min()
		notify = min.user == user && min.due == d
	} else if had {
		delete(x.pending, user)
	}
	x.mu.Unlock()
	if notify && x.changed != nil {
		x.changed(due)
	}
}

// TakeDue hands out up to max users due at now (max <= 0: no limit) and
// leases them for visibility.
func (x *Index) TakeDue(now time.Time, visibility time.Duration, max int) []Due {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := now.UnixNano()
	x.expireLeases(n)
	var out []Due
	for {
		if max > 0 && len(out) >= max {
			break
		}
		e, ok := x.ready.Min()
		if !ok || e.due > n {
			break
		}
		x.ready.DeleteMin()
		deadline := n + int64(visibility)
		x.leased[e.user] = deadline
		x.leases = append(x.leases, lease{e.user, deadline})
		out = append(out, Due{User: e.user, At: time.Unix(0, e.due)})
	}
	return out
}

// expireLeases offers leased users again once their lease has ended.
func (x *Index) expireLeases(now int64) {
	i := 0
	for ; i < len(x.leases); i++ {
		l := x.leases[i]
		if l.deadline > now {
			break
		}
		if d, ok := x.leased[l.user]; ok && d == l.deadline {
			delete(x.leased, l.user)
			if due, ok := x.pending[l.user]; ok {
				x.ready.ReplaceOrInsert(entry{due, l.user})
			}
		}
	}
	x.leases = x.leases[i:]
	if len(x.leases) == 0 {
		x.leases = nil // let the backing array go
	}
}

// Next returns when TakeDue will next have something to hand out: the
// earliest ready due time or the end of the earliest live lease.
func (x *Index) Next() (time.Time, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	// Drop leases that no longer hold (the user's value changed).
	for len(x.leases) > 0 {
		l := x.leases[0]
		if d, ok := x.leased[l.user]; ok && d == l.deadline {
			break
		}
		x.leases = x.leases[1:]
	}
	next, ok := int64(0), false
	if e, has := x.ready.Min(); has {
		next, ok = e.due, true
	}
	if len(x.leases) > 0 && (!ok || x.leases[0].deadline < next) {
		next, ok = x.leases[0].deadline, true
	}
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(0, next), true
}

// Len is the number of users with pending follow-ups.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.pending)
}

// Pending returns a copy of user → earliest due time, for tests and tools.
func (x *Index) Pending() map[string]time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	m := make(map[string]time.Time, len(x.pending))
	for u, d := range x.pending {
		m[u] = time.Unix(0, d)
	}
	return m
}
