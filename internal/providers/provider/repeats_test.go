package provider

import (
	"fmt"
	"testing"
	"time"
)

// A status is a repeat within RepeatWindow of its first sight; the memory
// forgets what is older, and the oldest first past its bound.
func TestRepeatsWindowAndBound(t *testing.T) {
	var r repeats
	t0 := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	if !r.add("a", t0) || r.add("a", t0.Add(RepeatWindow)) {
		t.Fatal("a repeat within the window was not recognized")
	}
	if !r.add("b", t0.Add(time.Minute)) || !r.add("a", t0.Add(RepeatWindow+time.Second)) {
		t.Fatal("a status after the window was taken for a repeat")
	}
	r.remove("b")
	if !r.add("b", t0.Add(2*time.Minute)) {
		t.Fatal("a removed status was taken for a repeat")
	}
	full := repeats{limit: 100}
	for i := range 101 {
		full.add(fmt.Sprint(i), t0)
	}
	if len(full.seen) > 100 || !full.add("0", t0) || full.add("100", t0) {
		t.Fatalf("bound: %d remembered", len(full.seen))
	}
}
