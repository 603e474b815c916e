package dueindex

import (
	"time"

	"github.com/lovoo/goka/storage"
)

// Goka 1.1.16 closes every partition's store when a group session ends (a
// rebalance) and opens the ones assigned in the next session, those that
// stay with this instance too. Building their indexes again costs a scan
// of each store (about 1.7 s for 500,000 users). The punctuator therefore
// keeps the index of a partition closed cleanly, for a while, and its next
// open takes it back instead of scanning, when the store is exactly as it
// was at the close.
//
// "Exactly as it was" needs the store's word: a store that implements
// CleanCloser reports whether it closed with nothing waiting (every write
// the index saw is in the store) and at which changelog offset. The next
// open takes the index back when the store, restored, is at that same
// offset: nothing was restored, so nothing changed. Anything else (another
// instance wrote the partition meanwhile, a write was lost with the close,
// a store that cannot tell) builds the index from the store as before.
//
// It also needs the session's word: a tick takes follow-ups and timers out
// of the index and relies on its own completion (the mark written, the
// wakes delivered) to account for them. A session whose end reports a
// failed partition (a tick that failed, an emit that was not delivered)
// may have left the index short of what the store says, so the indexes
// kept at a session's end wait for SessionEnded: kept if the session ended
// cleanly, dropped otherwise.

// CleanCloser is a partition store that can tell, after Close, whether it
// closed holding every write it was given (nothing waiting for the
// changelog) and the changelog offset it had reached. internal/localstore's
// store is one.
type CleanCloser interface {
	ClosedClean() (offset int64, ok bool)
}

// keepFor is how long a closed partition's index is kept for its next
// open: a rebalance opens the partitions of the next session within
// seconds.
const keepFor = 2 * time.Minute

type keptIndex struct {
	index     *Index
	offset    int64
	timer     *time.Timer
	confirmed bool // SessionEnded(true) since it was kept
}

// SessionEnded tells the punctuator that the consumer group session whose
// end closed the partitions ended cleanly (no partition failed) or not: the
// indexes kept from that session's close may be taken back, or are dropped.
// Call it after the session's cleanup closed the stores and before the
// next session opens them.
func (p *Punctuator) SessionEnded(clean bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for part, k := range p.kept {
		if clean {
			k.confirmed = true
			continue
		}
		k.timer.Stop()
		delete(p.kept, part)
	}
}

// keep holds the index of a partition whose store st just closed, if st
// closed cleanly.
func (p *Punctuator) keep(part int32, x *Index, st storage.Storage) {
	cc, ok := st.(CleanCloser)
	if !ok {
		return
	}
	offset, clean := cc.ClosedClean()
	if !clean {
		return
	}
	k := &keptIndex{index: x, offset: offset}
	p.mu.Lock()
	if old := p.kept[part]; old != nil {
		old.timer.Stop()
	}
	p.kept[part] = k
	k.timer = time.AfterFunc(keepFor, func() {
		p.mu.Lock()
		if p.kept[part] == k {
			delete(p.kept, part)
		}
		p.mu.Unlock()
	})
	p.mu.Unlock()
}

// reclaim returns the index kept for the partition if st, restored, is at
// the offset the index was kept at, made ready for the new open (Reopen);
// else nil. Either way the kept index is dropped.
func (p *Punctuator) reclaim(part int32, st storage.Storage) *Index {
	p.mu.Lock()
	k := p.kept[part]
	delete(p.kept, part)
	p.mu.Unlock()
	if k == nil {
		return nil
	}
	k.timer.Stop()
	if !k.confirmed {
		return nil
	}
	offset, err := st.GetOffset(-1)
	if err != nil || offset != k.offset {
		return nil
	}
	src, _ := st.(Store)
	if k.index.Windowed() && (src == nil || src.IndexVersion() != EntriesVersion) {
		return nil
	}
	k.index.Reopen(src)
	p.reused.Add(1)
	return k.index
}

// IndexesReused is how many partition opens took a kept index back
// instead of scanning their store.
func (p *Punctuator) IndexesReused() int64 { return p.reused.Load() }
