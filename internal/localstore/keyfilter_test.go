package localstore

import (
	"fmt"
	"testing"
)

// Every key added is found, across the filter's growth, and few others are.
func TestKeyFilter(t *testing.T) {
	f := newKeyFilter()
	if f.mayHave("a") {
		t.Fatal("an empty filter may have a key")
	}
	const n = 5*bloomFirstSize + 17 // three parts
	for i := range n {
		f.add(fmt.Sprint("user-", i))
	}
	if len(f.parts) != 3 {
		t.Errorf("%d parts for %d keys, want 3 (sized %d, then doubling)", len(f.parts), n, bloomFirstSize)
	}
	for i := range n {
		if !f.mayHave(fmt.Sprint("user-", i)) {
			t.Fatalf("user-%d added, not found", i)
		}
	}
	const others = 100000
	fp := 0
	for i := range others {
		if f.mayHave(fmt.Sprint("idle-", i)) {
			fp++
		}
	}
	if rate := float64(fp) / others; rate > 0.02 {
		t.Errorf("%.2f %% of keys never added found, want under 2 %%", 100*rate)
	}
}
