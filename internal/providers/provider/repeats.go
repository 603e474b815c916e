package provider

import (
	"fmt"
	"sync"
	"time"
)

// RepeatWindow is how long a callback endpoint remembers a status it
// published, to drop the same status sent again: longer than the age a
// signed callback may have (Twilio's Timestamp, the webhook's t) plus the
// skew allowed either way, so a replayed request that still verifies is
// recognized. A repeat after it reaches the dialer, which records nothing
// new for it.
const RepeatWindow = 30 * time.Minute

// maxRepeats bounds the statuses remembered (about 100 bytes each); past
// it the oldest are forgotten first.
const maxRepeats = 1 << 17

// repeats are the statuses an endpoint published recently. The zero value
// is ready; safe for concurrent use.
type repeats struct {
	limit int // 0: maxRepeats
	mu    sync.Mutex
	seen  map[string]time.Time
	order []seenAt // by the time seen
}

type seenAt struct {
	key string
	at  time.Time
}

// repeatKey identifies a status: the call, the provider's call, the
// outcome and whether it is final (Twilio's CallSid and CallStatus, or
// AnsweredBy).
func repeatKey(s Status) string {
	return fmt.Sprintf("%s\x00%s\x00%d\x00%t", s.CallID, s.ProviderCallID, s.Outcome, s.Final)
}

// add notes key as seen at now, and reports false if it was seen within
// RepeatWindow (a repeat).
func (r *repeats) add(key string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = make(map[string]time.Time)
	}
	limit := r.limit
	if limit <= 0 {
		limit = maxRepeats
	}
	for len(r.order) > 0 && (now.Sub(r.order[0].at) > RepeatWindow || len(r.seen) >= limit) {
		if old := r.order[0]; r.seen[old.key].Equal(old.at) {
			delete(r.seen, old.key)
		}
		r.order = r.order[1:]
	}
	if at, ok := r.seen[key]; ok && now.Sub(at) <= RepeatWindow {
		return false
	}
	r.seen[key] = now
	r.order = append(r.order, seenAt{key, now})
	return true
}

// remove forgets key: its status was not stored, and may come again.
func (r *repeats) remove(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, key)
}
