package kafkaclient

import (
	"fmt"
	"testing"
	"time"

	"github.com/lovoo/goka/storage"
)

// Goka's memory storage keeps the slice Set is given, not a copy: in a
// view, a slice of the fetch response the record came in, which then stays
// in memory with the entry.
func TestGokaMemoryStorageKeepsTheSliceItIsGiven(t *testing.T) {
	m := storage.NewMemory()
	buf := []byte("value")
	if err := m.Set("k", buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXX")
	if got, _ := m.Get("k"); string(got) != "XXXXX" {
		t.Errorf("Get after the caller changed its slice = %q: the storage copies values now", got)
	}
}

// Goka's memory storage sorts all its keys at each Set of a new key, so a
// Set costs time that grows with the keys stored, and a restore of n
// records takes time quadratic in n: the do-not-call list of 1,000,000
// entries on 8 partitions was not read in minutes (issue 33;
// internal/suppress has a storage of its own). The last thousand of 6,000
// new keys take more than 4 times as long as the first thousand (about 25
// times; a storage whose Set does not depend on the keys stored: about 1).
func TestGokaMemoryStorageSetCostGrowsWithItsKeys(t *testing.T) {
	const n, batch = 6000, 1000
	ratio := 0.0
	for attempt := 0; attempt < 3 && ratio <= 4; attempt++ {
		m := storage.NewMemory()
		var first, last time.Duration
		for b := 0; b < n/batch; b++ {
			began := time.Now()
			for i := b * batch; i < (b+1)*batch; i++ {
				// keys in no order: each new one lands anywhere
				if err := m.Set(fmt.Sprintf("%08x", uint32(i)*2654435761), []byte{1}); err != nil {
					t.Fatal(err)
				}
			}
			switch took := time.Since(began); b {
			case 0:
				first = took
			case n/batch - 1:
				last = took
			}
		}
		ratio = float64(last) / float64(first)
		t.Logf("attempt %d: first %d keys %v, last %d %v (%.1f times)", attempt+1, batch, first, batch, last, ratio)
	}
	if ratio <= 4 {
		t.Errorf("the last %d Sets took %.1f times as long as the first: Goka's memory storage no longer sorts at each Set", batch, ratio)
	}
}
