package kafkatest

import (
	"net"
	"runtime"
	"strconv"
	"strings"
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

// A broker that exits on start-up names the listener addresses another
// process holds.
func TestPortsTakenNamesHeldAddresses(t *testing.T) {
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	held, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(ports[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	b := &Broker{addr: "127.0.0.1:" + strconv.Itoa(ports[0]), ctrl: held.Addr().String()}
	got := b.portsTaken()
	if !strings.Contains(got, held.Addr().String()) || strings.Contains(got, b.addr) {
		t.Fatalf("portsTaken() = %q, want %s named and %s not", got, held.Addr(), b.addr)
	}
	held.Close()
	if got := b.portsTaken(); got != "" {
		t.Fatalf("portsTaken() with every port free = %q, want empty", got)
	}
}
