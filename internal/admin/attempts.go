package admin

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/ivrsched/ivrsched/internal/clock"
)

// Failed attempts at the admin token are limited per client host: after
// AttemptsBurst wrong tokens, one more each AttemptsEvery. A host over its
// limit gets 429 without its token being looked at.
const (
	AttemptsBurst = 10
	AttemptsEvery = 6 * time.Second
	// maxHosts bounds the hosts remembered; beyond it, the new hosts share
	// one count.
	maxHosts = 4096
)

// Attempts counts the failed attempts of each client host. The zero value
// is ready; safe for concurrent use.
type Attempts struct {
	Clock clock.Clock // nil: the real clock
	mu    sync.Mutex
	hosts map[string]*failures
}

// failures is a host's count of failed attempts, which leaks one each
// AttemptsEvery.
type failures struct {
	n  float64
	at time.Time
}

func (a *Attempts) now() time.Time {
	if a.Clock == nil {
		return time.Now()
	}
	return a.Clock.Now()
}

// host is the request's client host (its IP address).
func host(r *http.Request) string {
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return h
}

// count returns the host's failures now, leaked; nil when it has none.
// a.mu is held.
func (a *Attempts) count(h string, now time.Time) *failures {
	f := a.hosts[h]
	if f == nil {
		return nil
	}
	f.n = max(0, f.n-float64(now.Sub(f.at))/float64(AttemptsEvery))
	f.at = now
	return f
}

// Blocked reports whether r's host has failed too often; a nil Attempts
// blocks nothing.
func (a *Attempts) Blocked(r *http.Request) bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.count(host(r), a.now())
	return f != nil && f.n > AttemptsBurst-1
}

// Failed counts a failed attempt of r's host.
func (a *Attempts) Failed(r *http.Request) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now, h := a.now(), host(r)
	if a.hosts == nil {
		a.hosts = map[string]*failures{}
	}
	if _, ok := a.hosts[h]; !ok && len(a.hosts) >= maxHosts {
		for k := range a.hosts { // forget the hosts whose failures leaked away
			if f := a.count(k, now); f.n == 0 {
				delete(a.hosts, k)
			}
		}
		if len(a.hosts) >= maxHosts {
			h = "(other hosts)"
		}
	}
	f := a.count(h, now)
	if f == nil {
		f = &failures{at: now}
		a.hosts[h] = f
	}
	f.n++
}

// TooMany answers 429: r's host has failed too often.
func TooMany(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "6")
	http.Error(w, "429 too many wrong admin tokens from this host: try again later", http.StatusTooManyRequests)
}
