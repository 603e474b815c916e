package asynq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ivrsched/ivrsched/bench/harness"
)

// ErrNoRedisServer means redis-server is not on PATH.
var ErrNoRedisServer = errors.New("redis-server not found on PATH: install it with `apt-get install -y redis-server` (Debian package redis-server)")

// RedisOptions configures RunRedis.
type RedisOptions struct {
	// Dir is the working directory of redis-server (its log, and the AOF
	// file when AppendOnly is set). It is created if missing.
	Dir string
	// AppendOnly turns on the append-only file with fsync every second
	// (--appendonly yes --appendfsync everysec), how asynq is usually run in
	// production. Off by default: the benchmark then measures asynq on a
	// purely in-memory Redis (--save "" --appendonly no), its best case;
	// with AppendOnly a Redis crash loses at most about 1 s of writes.
	AppendOnly bool
}

// Redis is a running redis-server.
type Redis struct {
	Addr string // host:port
	proc *harness.Process
}

// PID is the redis-server's process id (for CPU and memory accounting).
func (r *Redis) PID() int { return r.proc.PID() }

// Stop terminates redis-server (SIGTERM, SIGKILL after 10 s) and waits.
func (r *Redis) Stop() error { return r.proc.Stop(10 * time.Second) }

// StartRedis runs redis-server on 127.0.0.1 on a free port with its files
// in dir, without persistence (--save "" --appendonly no: see
// RedisOptions.AppendOnly), and returns once it answers PING. stop
// terminates it.
func StartRedis(ctx context.Context, dir string) (addr string, stop func() error, err error) {
	r, err := RunRedis(ctx, RedisOptions{Dir: dir})
	if err != nil {
		return "", nil, err
	}
	return r.Addr, r.Stop, nil
}

// RunRedis is StartRedis with options, returning the process too.
func RunRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedisServer
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("redis dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("redis dir: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--dir", dir, "--logfile", "redis.log", "--daemonize", "no",
		"--save", "",
	}
	if opts.AppendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "everysec")
	} else {
		args = append(args, "--appendonly", "no")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	proc, err := harness.StartProcess(cmd, "") // it writes redis.log itself
	if err != nil {
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), proc: proc}
	if err := waitPing(ctx, r.Addr, proc.Exited(), 10*time.Second); err != nil {
		_ = r.Stop()
		return nil, fmt.Errorf("redis-server on %s (log %s): %w", r.Addr, filepath.Join(dir, "redis.log"), err)
	}
	return r, nil
}

func waitPing(ctx context.Context, addr string, exited <-chan struct{}, timeout time.Duration) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return errors.New("redis-server exited before answering PING")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG after %s: %w", timeout, err)
		}
	}
}

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another
// process could take it before redis-server binds it; RunRedis then fails
// with redis-server's log named in the error.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
