package app

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Embedded is an in-process Kafka-protocol broker (franz-go's kfake), for
// the one-command demo and fast tests. It is not Apache Kafka.
type Embedded struct {
	cluster *kfake.Cluster
	addr    string
}

// StartEmbedded starts a one-broker cluster listening on addr (host:port;
// port 0 picks a free one). dataDir, if not empty, persists its log there
// so pending follow-ups survive a restart; it is made (or made again)
// mode 0700.
func StartEmbedded(addr, dataDir string) (*Embedded, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("embedded broker address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded broker address %q: bad port", addr)
	}
	if port == 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("embedded broker: %w", err)
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
	}
	listenAddr := net.JoinHostPort(host, strconv.Itoa(port))
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) { return net.Listen(network, listenAddr) }),
	}
	if dataDir != "" {
		// The partitions hold the commands and the tables' changelogs,
		// phone numbers included; kfake makes its files 0644 and its
		// directories 0755 (fixed modes), so the directory above them is
		// this user's alone.
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("embedded broker data: %w", err)
		}
		if err := os.Chmod(dataDir, 0o700); err != nil {
			return nil, fmt.Errorf("embedded broker data: %w", err)
		}
		opts = append(opts, kfake.DataDir(dataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("embedded broker on %s: %w", listenAddr, err)
	}
	return &Embedded{cluster: c, addr: listenAddr}, nil
}

// Addr is the broker's address.
func (e *Embedded) Addr() string { return e.addr }

// Close stops the broker.
func (e *Embedded) Close() { e.cluster.Close() }
