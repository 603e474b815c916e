package kafkatest

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// freePorts reserves n distinct free TCP ports on 127.0.0.1 for a broker's
// listeners. They are released before the JVM binds them, a second or two
// later, so they are taken below the kernel's ephemeral range. Every
// outgoing connection on the machine (other test packages' clients and
// brokers run alongside) gets its local port from that range, so a port
// chosen with port 0 can be taken in that window; a broker whose
// controller port is taken exits on start-up, often with nothing logged.
// Below the range, only a process that binds a port by number can take it.
// Where the range cannot be read, the kernel chooses (port 0).
func freePorts(n int) ([]int, error) {
	lo, hi := listenPortRange()
	ports := make([]int, 0, n)
	for range n {
		l, err := listenBelowEphemeral(lo, hi)
		if err != nil {
			return nil, fmt.Errorf("kafkatest: find free port: %w", err)
		}
		defer l.Close() // held until all are chosen, so they differ
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// listenBelowEphemeral listens on a random free port in [lo, hi), or on
// port 0 if the range is empty.
func listenBelowEphemeral(lo, hi int) (net.Listener, error) {
	if lo >= hi {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	const attempts = 100
	var err error
	for range attempts {
		port := lo + rand.IntN(hi-lo)
		var l net.Listener
		if l, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			return l, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("%d ports in [%d, %d) in use: %w", attempts, lo, hi, err)
}

// minListenPort is the lowest port freePorts picks: above the well-known
// and the common service ports.
const minListenPort = 10000

// listenPortRange returns where freePorts picks ports: from minListenPort
// up to the start of the ephemeral range, or an empty range if the kernel
// does not say where that starts or it starts too low to leave room.
func listenPortRange() (lo, hi int) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return 0, 0
	}
	start, err := strconv.Atoi(fields[0])
	if err != nil || start < minListenPort+1000 {
		return 0, 0
	}
	return minListenPort, start
}

// portsTaken names the broker's listener addresses that another process
// holds now that the broker has exited, for the error of a failed start:
// a taken controller port often ends the broker with nothing logged.
func (b *Broker) portsTaken() string {
	addrs := append([]string{b.addr, b.ctrl}, slices.Sorted(maps.Values(b.listeners))...)
	var taken []string
	for _, addr := range addrs {
		if addr == "" {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err == nil {
			l.Close()
			continue
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			taken = append(taken, addr)
		}
	}
	if len(taken) == 0 {
		return ""
	}
	return "; another process holds its listener address " + strings.Join(taken, ", ")
}
