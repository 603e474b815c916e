package app

import (
	"context"
	"sync"
	"time"

	"github.com/ivrsched/ivrsched/internal/clock"
)

// deadLetterEvery is the shortest time between two scans of the
// dead-letter topics for the web page.
const deadLetterEvery = time.Minute

// deadLetterScanTimeout bounds one scan.
const deadLetterScanTimeout = 30 * time.Second

// deadLetterCache serves the web page's dead-letter counts: a scan of the
// dead-letter topics (deadLetterCounts) at most once each deadLetterEvery,
// however many GETs ask. The first GETs wait for the first scan together;
// later ones get the last counts at once, and one that finds them older
// than deadLetterEvery starts a scan in the background that refreshes
// them. A scan's error is kept as its counts are.
type deadLetterCache struct {
	scan  func(context.Context) (map[string]int, error)
	clock clock.Clock

	mu      sync.Mutex
	at      time.Time // when the last scan ended; zero: none has
	counts  map[string]int
	err     error
	running chan struct{} // closed when the scan under way ends; nil: none
}

func newDeadLetterCache(scan func(context.Context) (map[string]int, error), clk clock.Clock) *deadLetterCache {
	if clk == nil {
		clk = clock.Real{}
	}
	return &deadLetterCache{scan: scan, clock: clk}
}

// get returns the last counts, waiting for the first scan if none has
// ended yet (until ctx ends).
func (d *deadLetterCache) get(ctx context.Context) (map[string]int, error) {
	d.mu.Lock()
	if d.running == nil && (d.at.IsZero() || d.clock.Now().Sub(d.at) >= deadLetterEvery) {
		d.running = make(chan struct{})
		go d.refresh(d.running)
	}
	if !d.at.IsZero() { // the last counts, even while a scan refreshes them
		counts, err := d.counts, d.err
		d.mu.Unlock()
		return counts, err
	}
	wait := d.running
	d.mu.Unlock()
	select {
	case <-wait:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts, d.err
}

// refresh scans, keeps the counts and closes done.
func (d *deadLetterCache) refresh(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), deadLetterScanTimeout)
	counts, err := d.scan(ctx)
	cancel()
	d.mu.Lock()
	d.counts, d.err, d.at, d.running = counts, err, d.clock.Now(), nil
	d.mu.Unlock()
	close(done)
}
