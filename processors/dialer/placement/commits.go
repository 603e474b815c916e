package placement

import (
	"sort"
	"sync"
)

// Marker marks a partition's next offset to commit (sarama's
// ConsumerGroupSession.MarkOffset for one topic and partition).
type Marker func(next int64)

// commits is the in-order commit tracker of one partition of ivr-calls for
// one consumer group session: the records consumed, in offset order, and
// what each still waits for. A record is done when nothing is left to wait
// for: Goka committed it (its callback returned and what it wrote was
// acknowledged) and, if its call was handed to the placer, the call's
// first status is recorded in the user's value (or the call was dropped:
// the user was forgotten). The partition is committed up to the lowest
// offset not done, so after a crash or a rebalance the partition's next
// owner consumes again exactly the calls whose outcome is not recorded.
//
// Records are registered (add) by the partition's goroutine in offset
// order; done is called from any goroutine, in any order. mark is called
// under the tracker's lock, with a watermark that only grows, until unbind.
type commits struct {
	mu      sync.Mutex
	mark    Marker // nil: nothing is marked (unbound)
	offsets []int64
	waits   []int8 // per offset: what it still waits for
	head    int    // offsets[head:] are registered and not done
	next    int64  // one past the last offset registered (-1: none yet)
	marked  int64  // the last watermark marked
	// then are called, in order, once the watermark reaches their at.
	then []then
}

type then struct {
	at int64
	f  func()
}

func newCommits(mark Marker) *commits {
	return &commits{mark: mark, next: -1, marked: -1}
}

// add registers the record at offset, which waits for n things to be done.
// An offset not above the last one registered is ignored (it cannot come
// twice in a session).
func (c *commits) add(offset int64, n int8) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if offset < c.next {
		return
	}
	if c.head > 1024 && c.head > len(c.offsets)/2 {
		c.offsets = append(c.offsets[:0], c.offsets[c.head:]...)
		c.waits = append(c.waits[:0], c.waits[c.head:]...)
		c.head = 0
	}
	c.offsets = append(c.offsets, offset)
	c.waits = append(c.waits, n)
	c.next = offset + 1
}

// wait adds one more thing the record at offset waits for (it must not be
// done yet: called on the partition's goroutine before its callback
// returns).
func (c *commits) wait(offset int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, ok := c.find(offset); ok {
		c.waits[i]++
	}
}

// done tells that one thing the record at offset waited for is done, and
// marks the new watermark if it moved.
func (c *commits) done(offset int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.find(offset)
	if !ok || c.waits[i] <= 0 {
		return
	}
	if c.waits[i]--; i != c.head || c.waits[i] > 0 {
		return
	}
	for c.head < len(c.offsets) && c.waits[c.head] <= 0 {
		c.head++
	}
	w := c.watermarkLocked()
	if w > c.marked && c.mark != nil {
		c.marked = w
		c.mark(w)
	}
	for len(c.then) > 0 && c.then[0].at <= w {
		c.then[0].f()
		c.then = c.then[1:]
	}
}

// after calls f once everything registered so far is done (at once if it
// is), under the tracker's lock: f must not call back into it.
func (c *commits) after(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.watermarkLocked() >= c.next {
		f()
		return
	}
	c.then = append(c.then, then{at: c.next, f: f})
}

func (c *commits) find(offset int64) (int, bool) {
	rest := c.offsets[c.head:]
	i := sort.Search(len(rest), func(i int) bool { return rest[i] >= offset })
	if i == len(rest) || rest[i] != offset {
		return 0, false
	}
	return c.head + i, true
}

// watermarkLocked is the lowest offset not done, or one past the last
// registered when all are (-1 before any).
func (c *commits) watermarkLocked() int64 {
	if c.head < len(c.offsets) {
		return c.offsets[c.head]
	}
	return c.next
}

// watermark is the offset the partition may be committed up to.
func (c *commits) watermark() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.watermarkLocked()
}

// registered is one past the last offset registered (-1: none yet).
func (c *commits) registered() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next
}

// pending is how many records are not done.
func (c *commits) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range c.waits[c.head:] {
		if w > 0 {
			n++
		}
	}
	return n
}

// unbind stops the marks: once it returns, mark is not called again.
func (c *commits) unbind() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mark = nil
}
