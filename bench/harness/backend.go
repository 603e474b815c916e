package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

// Counters are what a shared server (Kafka, Redis) has done so far.
type Counters struct {
	Messages int64            // records written (Kafka) or commands processed (Redis)
	Bytes    int64            // bytes stored (Kafka log size) or received (Redis)
	CPU      time.Duration    // the server process's CPU time
	Topics   map[string]int64 // Kafka: records per topic
}

// Sub is c - o.
func (c Counters) Sub(o Counters) Counters {
	d := Counters{Messages: c.Messages - o.Messages, Bytes: c.Bytes - o.Bytes, CPU: c.CPU - o.CPU}
	for t, n := range c.Topics {
		if n -= o.Topics[t]; n != 0 {
			if d.Topics == nil {
				d.Topics = map[string]int64{}
			}
			d.Topics[t] = n
		}
	}
	return d
}

// Backend is a shared server the harness measures.
type Backend interface {
	Counters(ctx context.Context) (Counters, error)
	PID() int
}

// KafkaBackend measures a Kafka broker: records are the sum of every
// partition's end offset, bytes the size of its log segments (*.log; index
// files are preallocated and would hide the data).
type KafkaBackend struct {
	Brokers []string
	DataDir string // empty: bytes are not measured
	Pid     func() int
}

// PID is the broker's process id.
func (k KafkaBackend) PID() int { return k.Pid() }

// Counters reads the broker's counters. A topic a system has just created
// may have no leader yet in the metadata: it tries again for up to 10 s.
func (k KafkaBackend) Counters(ctx context.Context) (Counters, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := k.counters()
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return Counters{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (k KafkaBackend) counters() (Counters, error) {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	c, err := sarama.NewClient(k.Brokers, cfg)
	if err != nil {
		return Counters{}, fmt.Errorf("kafka counters: %w", err)
	}
	defer c.Close()
	topics, err := c.Topics()
	if err != nil {
		return Counters{}, fmt.Errorf("kafka counters: %w", err)
	}
	var msgs int64
	per := map[string]int64{}
	for _, t := range topics {
		parts, err := c.Partitions(t)
		if err != nil {
			return Counters{}, fmt.Errorf("kafka counters: %w", err)
		}
		for _, p := range parts {
			off, err := c.GetOffset(t, p, sarama.OffsetNewest)
			if err != nil {
				return Counters{}, fmt.Errorf("kafka counters %s/%d: %w", t, p, err)
			}
			msgs += off
			per[t] += off
		}
	}
	out := Counters{Messages: msgs, CPU: CPUTime(k.Pid()), Topics: per}
	if k.DataDir != "" {
		out.Bytes = DirSize(k.DataDir, ".log")
	}
	return out, nil
}

// RedisBackend measures a redis-server through INFO.
type RedisBackend struct {
	Addr string
	Pid  func() int
}

// PID is the server's process id.
func (r RedisBackend) PID() int { return r.Pid() }

// Counters reads total_commands_processed and total_net_input_bytes.
func (r RedisBackend) Counters(ctx context.Context) (Counters, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", r.Addr)
	if err != nil {
		return Counters{}, fmt.Errorf("redis counters: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n")); err != nil {
		return Counters{}, fmt.Errorf("redis counters: %w", err)
	}
	rd := bufio.NewReader(conn)
	head, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return Counters{}, fmt.Errorf("redis counters: reply %q: %v", head, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(head[1:]))
	body := make([]byte, n)
	if _, err := io.ReadFull(rd, body); err != nil {
		return Counters{}, fmt.Errorf("redis counters: %w", err)
	}
	out := Counters{CPU: CPUTime(r.Pid())}
	for _, line := range strings.Split(string(body), "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		switch k {
		case "total_commands_processed":
			out.Messages, _ = strconv.ParseInt(v, 10, 64)
		case "total_net_input_bytes":
			out.Bytes, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return out, nil
}
