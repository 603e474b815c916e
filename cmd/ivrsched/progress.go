package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress shows how far a long command is, on one line of standard error
// rewritten in place, when standard error is a terminal; otherwise it
// prints nothing (a log or a pipe gets only the results).
type progress struct {
	w     io.Writer // nil: not a terminal
	what  string
	last  time.Time
	every time.Duration
	shown bool
}

func newProgress(what string) *progress {
	p := &progress{what: what, every: 200 * time.Millisecond}
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		p.w = os.Stderr
	}
	return p
}

// update shows done of total (total 0: unknown), with a note, at most every
// 200 ms and always at the end.
func (p *progress) update(done, total int64, note string) {
	if p.w == nil {
		return
	}
	now := time.Now()
	if done != total && now.Sub(p.last) < p.every {
		return
	}
	p.last = now
	p.shown = true
	if total > 0 {
		fmt.Fprintf(p.w, "\r%s: %d/%d (%d%%) %s\033[K", p.what, done, total, done*100/total, note)
	} else {
		fmt.Fprintf(p.w, "\r%s: %d %s\033[K", p.what, done, note)
	}
}

// done ends the progress line.
func (p *progress) done() {
	if p.w != nil && p.shown {
		fmt.Fprintln(p.w)
	}
}
