package placement

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// A partition's two input topics are consumed side by side, so a call the
// scheduler fired before its user's Forget may reach the dialer after the
// Forget (ivr-calls lagging behind followup-events). Each partition
// therefore remembers its recent Forgets, in memory only (the user id and
// the Forget's place), and drops the calls of their users fired at or
// before them. The times compared here are places in the scheduler's
// onboarding partition, not clocks: the dialer hands a Forget's onboarding
// offset (ScheduleEvent.forget_offset) and, as a call's fired time, the
// onboarding offset of the command that created the value it was fired
// from (IVRCall.created_offset), each mapped to a time
// (processors/dialer's orderTime). A call from a value created before the
// Forget was fired before it. A Forget or call without a place (an older
// scheduler, or a value from before the onboarding offsets started again)
// has the time far in the future or none: the user's calls are dropped
// while the Forget is live.
//
// A Forget retires, and its followup-events record may then be committed
// once every ivr-calls record consumed so far is (commits.after), when no
// call fired before it can still come:
//   - a call of the partition placed after it is consumed (one from a value
//     created after the Forget): the scheduler fired every call before the
//     Forget before that one, on the same ivr-calls partition (its
//     producer keeps a partition's order), so they were all consumed
//     already; or
//   - ForgetGrace after it was consumed, once ivr-calls is consumed up to
//     its end as the partition's claim last saw it: the grace covers a
//     call whose write was still under way when the Forget was written.
//     Most Forgets retire this way (a call from a value newer than the
//     Forget is rare), so followup-events commits lag the Forgets by about
//     ForgetGrace.

// forgot is one recent Forget.
type forgot struct {
	user   string
	at     time.Time // the Forget's place as a time: calls at or before it are dropped
	offset int64     // its followup-events record
	since  time.Time // when the dialer consumed it (the placer's clock)
}

// forgets are the recent Forgets of one partition. The partition's
// goroutine adds and checks, its sweeper retires on the quiet path; recent
// counts the live ones of all partitions (the placer's, read without a
// lock on every call).
type forgets struct {
	recent *atomic.Int64

	mu       sync.Mutex
	live     []*forgot          // by time
	byUser   map[string]*forgot // the latest live one of each user
	sweeping bool               // a sweeper runs
	closed   bool               // the partition was given up
}

func newForgets(recent *atomic.Int64) *forgets {
	return &forgets{recent: recent, byUser: map[string]*forgot{}}
}

// add remembers f; it returns whether a sweeper must be started.
func (fs *forgets) add(f *forgot) (sweep bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return false
	}
	i := sort.Search(len(fs.live), func(i int) bool { return fs.live[i].at.After(f.at) })
	fs.live = append(fs.live, nil)
	copy(fs.live[i+1:], fs.live[i:])
	fs.live[i] = f
	if last := fs.byUser[f.user]; last == nil || !f.at.Before(last.at) {
		fs.byUser[f.user] = f
	}
	fs.recent.Add(1)
	sweep = !fs.sweeping
	fs.sweeping = true
	return sweep
}

// check says whether a call of user fired at fired is to be dropped (fired
// at or before a live Forget of its user; a call with no time is), and
// retires the Forgets before fired.
func (fs *forgets) check(user string, fired *timestamppb.Timestamp) (drop bool, retired []*forgot) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.byUser[user]
	if fired == nil {
		return f != nil, nil
	}
	t := fired.AsTime()
	drop = f != nil && !t.After(f.at)
	n := 0
	for n < len(fs.live) && fs.live[n].at.Before(t) {
		n++
	}
	if n > 0 {
		retired = fs.remove(fs.live[:n:n])
		fs.live = fs.live[n:]
	}
	return drop, retired
}

// due retires the Forgets consumed grace or longer before now, if ivr-calls
// is caught up; more says whether any are left (if none, the sweeper
// stops).
func (fs *forgets) due(now time.Time, grace time.Duration, caughtUp bool) (retired []*forgot, more bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if caughtUp && !fs.closed {
		var keep []*forgot
		for _, f := range fs.live {
			if now.Sub(f.since) >= grace {
				retired = append(retired, f)
			} else {
				keep = append(keep, f)
			}
		}
		fs.live = keep
		retired = fs.remove(retired)
	}
	if len(fs.live) == 0 || fs.closed {
		fs.sweeping = false
		return retired, false
	}
	return retired, true
}

// remove takes out of byUser the Forgets gone from live (called with mu
// held, after they left live or with live about to drop them). An older
// Forget of the same user still live needs no entry: whatever retired the
// newer one (a call fired after it, or the grace on a caught-up partition)
// says that no call fired before the older one can come either.
func (fs *forgets) remove(gone []*forgot) []*forgot {
	fs.recent.Add(-int64(len(gone)))
	for _, f := range gone {
		if fs.byUser[f.user] == f {
			delete(fs.byUser, f.user)
		}
	}
	return gone
}

// close forgets them all: the partition was given up (its Forgets not
// committed are consumed again by its next owner).
func (fs *forgets) close() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !fs.closed {
		fs.closed = true
		fs.recent.Add(-int64(len(fs.live)))
		fs.live, fs.byUser = nil, map[string]*forgot{}
	}
}
