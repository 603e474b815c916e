package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/webui"
)

// The web page's dead-letter counts cost at most one scan of the
// dead-letter topics a minute, however many GETs ask: GETs at the same
// time share a scan, later ones get its counts, and once a minute has
// passed a GET is answered from them while one scan refreshes them.
func TestDeadLetterCountsScanOnceAMinute(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	var scans atomic.Int32
	release := make(chan struct{})
	dl := newDeadLetterCache(func(context.Context) (map[string]int, error) {
		n := scans.Add(1)
		if n == 1 {
			<-release // the first scan is slow: the first GETs wait for it together
		}
		return map[string]int{"invalid_phone": int(n)}, nil
	}, clk)
	h := webui.Handler(webui.Source{DeadLetters: dl.get})
	get := func() string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/", nil))
		return rec.Body.String()
	}
	var wg sync.WaitGroup
	pages := make([]string, 8)
	for i := range pages {
		wg.Go(func() { pages[i] = get() })
	}
	close(release)
	wg.Wait()
	for i := 0; i < 10; i++ {
		pages = append(pages, get())
	}
	for _, p := range pages {
		if !strings.Contains(p, "<td>invalid_phone</td><td>1</td>") {
			t.Fatalf("a page lacks the counts of the first scan:\n%s", p)
		}
	}
	if n := scans.Load(); n != 1 {
		t.Fatalf("%d GETs made %d scans, want 1", len(pages), n)
	}
	clk.Advance(time.Minute)
	if p := get(); !strings.Contains(p, "<td>invalid_phone</td><td>1</td>") {
		t.Fatalf("a GET while the counts refresh lacks the last ones:\n%s", p)
	}
	dl.mu.Lock()
	refresh := dl.running // the scan that GET started, unless it ended
	dl.mu.Unlock()
	if refresh != nil {
		<-refresh
	}
	if p := get(); !strings.Contains(p, "<td>invalid_phone</td><td>2</td>") || scans.Load() != 2 {
		t.Fatalf("after a minute: %d scans, page:\n%s", scans.Load(), p)
	}
}
