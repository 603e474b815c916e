package kafkatest

import (
	"runtime"
	"testing"
)

// The brokers' ports are chosen below the ephemeral range, where no
// outgoing connection can take them between the choice and the JVM's bind.
func TestFreePortsBelowEphemeralRange(t *testing.T) {
	lo, hi := listenPortRange()
	if lo >= hi {
		if runtime.GOOS == "linux" {
			t.Fatalf("listenPortRange() = [%d, %d): no room below the ephemeral range on Linux", lo, hi)
		}
		t.Skipf("no ephemeral range to stay below on %s", runtime.GOOS)
	}
	ports, err := freePorts(50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < lo || p >= hi {
			t.Errorf("port %d outside [%d, %d)", p, lo, hi)
		}
		if seen[p] {
			t.Errorf("port %d chosen twice", p)
		}
		seen[p] = true
	}
}
