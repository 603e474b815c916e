// Package asynq is the asynq (github.com/hibiken/asynq v0.26.0, on Redis)
// baseline of the benchmark, as a harness.System.
//
// The harness process enqueues each task with ProcessAt(due) from a pool of
// goroutines; the asynq server runs in its own process (the asynq-worker
// binary, built by Start) so that its CPU and memory are measured apart.
// The worker prints one line per handled task, which Observe turns into a
// harness.Fire. Crash is SIGKILL of the worker, Recover starts it again:
// asynq's own recovery applies (a task that was running when the worker
// was killed stays "active" until its 30 s lease has been expired for 30 s,
// the recoverer, which runs at start and every minute, then moves it to the
// retry set with asynq's default retry delay, 15-45 s for the first retry).
package asynq

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/ivrsched/ivrsched/bench/harness"
)

// Options selects how the asynq baseline runs.
type Options struct {
	// CheckInterval is the worker's --check-interval: asynq's
	// DelayedTaskCheckInterval and TaskCheckInterval. 0 keeps asynq's
	// defaults (5 s and 1 s).
	CheckInterval time.Duration
	// TaskCheckInterval, if not 0, is the worker's --task-check-interval:
	// asynq's TaskCheckInterval alone (to vary the forwarder and the
	// processor's idle poll separately).
	TaskCheckInterval time.Duration
	// Concurrency is the worker's --concurrency (0: asynq's default, NumCPU).
	Concurrency int
	// Enqueuers is how many goroutines enqueue concurrently (default 32).
	Enqueuers int
	// WorkerBin is a prebuilt asynq-worker binary. If empty, Start builds
	// one into the work directory from ModuleDir.
	WorkerBin string
	// ModuleDir is the directory of the bench module (its go.mod). If empty,
	// it is found from this source file's location, else `go env GOMOD`.
	ModuleDir string
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL
	// (default 15 s; asynq itself waits up to 8 s for running handlers).
	StopTimeout time.Duration
}

// New returns the asynq baseline named name (also its asynq queue, so that
// several asynq systems can share one Redis).
func New(name string, opts Options) harness.System {
	if opts.Enqueuers <= 0 {
		opts.Enqueuers = 32
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 15 * time.Second
	}
	return &System{name: name, opts: opts}
}

// Default is asynq with its default check intervals: "asynq-default".
func Default() harness.System { return New("asynq-default", Options{}) }

// Fast is asynq with 100 ms check intervals: "asynq-100ms".
func Fast() harness.System {
	return New("asynq-100ms", Options{CheckInterval: 100 * time.Millisecond})
}

// System implements harness.System; build it with New.
type System struct {
	name string
	opts Options

	env    harness.Env
	log    *slog.Logger
	bin    string
	client *asynq.Client
	fires  chan harness.Fire // from every worker process's stdout reader
	quit   chan struct{}     // closed by Stop: readers stop sending

	mu     sync.Mutex
	worker *harness.Process // nil when crashed or stopped
}

// Name implements harness.System.
func (s *System) Name() string { return s.name }

// Start builds the worker (unless Options.WorkerBin), empties this system's
// queue in Redis, connects the client and starts the worker.
func (s *System) Start(ctx context.Context, env harness.Env) error {
	if env.RedisAddr == "" {
		return errors.New("asynq: harness.Env.RedisAddr is empty (start Redis with StartRedis)")
	}
	s.env = env
	s.log = env.Log
	if s.log == nil {
		s.log = slog.Default()
	}
	s.log = s.log.With("system", s.name)
	s.fires = make(chan harness.Fire, 1<<16)
	s.quit = make(chan struct{})

	s.bin = s.opts.WorkerBin
	if s.bin == "" {
		bin, err := buildWorker(ctx, s.opts.ModuleDir, env.WorkDir)
		if err != nil {
			return err
		}
		s.bin = bin
	}

	redisOpt := asynq.RedisClientOpt{Addr: env.RedisAddr, PoolSize: s.opts.Enqueuers}
	insp := asynq.NewInspector(redisOpt)
	err := insp.DeleteQueue(s.name, true) // leftovers of an earlier run
	insp.Close()
	if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
		return fmt.Errorf("asynq: delete queue %q: %w", s.name, err)
	}
	s.client = asynq.NewClient(redisOpt)
	if err := s.client.Ping(); err != nil {
		return fmt.Errorf("asynq: ping redis %s: %w", env.RedisAddr, err)
	}
	return s.startWorker(ctx)
}

// Schedule enqueues every task with ProcessAt(due) from Options.Enqueuers
// goroutines and returns once Redis has acknowledged all of them.
//
// ProcessAt with the absolute due time is ProcessIn(due - now) without the
// drift of computing now. asynq stores the time as a whole-second score
// (processAt.Unix(), truncated), which is why it can fire up to 1 s early.
// The task keeps asynq's default MaxRetry (25): with MaxRetry(0) a task
// running when the worker is killed would be archived, i.e. lost.
func (s *System) Schedule(ctx context.Context, tasks []harness.Task) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan harness.Task)
	var wg sync.WaitGroup
	for range s.opts.Enqueuers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range next {
				task := asynq.NewTask(TaskType, EncodePayload(t.Due, t.Payload))
				_, err := s.client.EnqueueContext(ctx, task,
					asynq.Queue(s.name), asynq.TaskID(t.ID), asynq.ProcessAt(t.Due))
				if err != nil {
					cancel(fmt.Errorf("asynq: enqueue %q: %w", t.ID, err))
					return
				}
			}
		}()
	}
feed:
	for _, t := range tasks {
		if strings.ContainsAny(t.ID, " \t\r\n") || t.ID == "" {
			cancel(fmt.Errorf("asynq: task id %q is empty or has white space", t.ID))
			break
		}
		select {
		case next <- t:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// Observe implements harness.System. It returns nil when ctx ends.
func (s *System) Observe(ctx context.Context, out chan<- harness.Fire) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case f := <-s.fires:
			select {
			case out <- f:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// PIDs is the worker's pid (none while crashed).
func (s *System) PIDs() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return harness.PIDs(s.worker)
}

// Crash kills the worker with SIGKILL and waits until it is gone.
func (s *System) Crash() error {
	s.mu.Lock()
	w := s.worker
	s.worker = nil
	s.mu.Unlock()
	if w == nil {
		return errors.New("asynq: no worker running")
	}
	if err := w.Kill(); err != nil {
		return fmt.Errorf("asynq: kill worker: %w", err)
	}
	return nil
}

// Recover starts the worker again with the same flags.
func (s *System) Recover(ctx context.Context) error { return s.startWorker(ctx) }

// Stop stops the worker (SIGTERM, SIGKILL after Options.StopTimeout) and
// closes the client.
func (s *System) Stop() error {
	s.mu.Lock()
	w := s.worker
	s.worker = nil
	s.mu.Unlock()
	var errs []error
	if w != nil {
		if err := w.Stop(s.opts.StopTimeout); err != nil {
			errs = append(errs, fmt.Errorf("asynq: stop worker: %w", err))
		}
	}
	if s.quit != nil {
		close(s.quit)
	}
	if s.client != nil {
		if err := s.client.Close(); err != nil {
			errs = append(errs, fmt.Errorf("asynq: close client: %w", err))
		}
	}
	return errors.Join(errs...)
}

// startWorker starts the worker process and returns once it printed ready.
// Its stderr goes to asynq-worker.log in the work directory.
func (s *System) startWorker(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.worker != nil {
		return errors.New("asynq: worker already running")
	}
	args := []string{
		"--redis", s.env.RedisAddr, "--queue", s.name,
		"--check-interval", s.opts.CheckInterval.String(),
		"--task-check-interval", s.opts.TaskCheckInterval.String(),
		"--concurrency", strconv.Itoa(s.opts.Concurrency),
	}
	logPath := filepath.Join(s.env.WorkDir, s.name+"-worker.log")
	// Our own pipe (not StdoutPipe) so that waiting for the process and
	// reading its output are independent: Crash waits for the exit even
	// while nobody observes. Its stderr goes to the log.
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("asynq: worker pipe: %w", err)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout = pw
	w, err := harness.StartProcess(cmd, logPath)
	pw.Close()
	if err != nil {
		pr.Close()
		return fmt.Errorf("asynq: worker: %w", err)
	}
	go func() {
		<-w.Exited()
		s.mu.Lock()
		unexpected := s.worker == w
		s.mu.Unlock()
		if unexpected {
			s.log.Error("asynq worker exited", "pid", w.PID(), "err", w.Err(), "log", logPath)
		}
	}()
	ready := make(chan struct{})
	go s.read(pr, ready)

	select {
	case <-ready:
	case <-w.Exited():
		return fmt.Errorf("asynq: worker exited before it was ready (see %s)", logPath)
	case <-ctx.Done():
		_ = w.Kill()
		return fmt.Errorf("asynq: waiting for the worker: %w", ctx.Err())
	}
	s.worker = w
	s.log.Info("asynq worker started", "pid", w.PID(), "args", args)
	return nil
}

// read turns the worker's output lines into fires until EOF (the process
// ended) or Stop.
func (s *System) read(r *os.File, ready chan<- struct{}) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Bytes()
		if string(line) == readyLine {
			close(ready)
			continue
		}
		f, err := parseFire(line)
		if err != nil {
			s.log.Warn("asynq: bad worker line", "line", string(line), "err", err)
			continue
		}
		select {
		case s.fires <- f:
		case <-s.quit:
			return
		}
	}
	if err := sc.Err(); err != nil {
		s.log.Warn("asynq: reading worker output", "err", err)
	}
}

// parseFire parses "<id> <at unix nanos> <due unix nanos>".
func parseFire(line []byte) (harness.Fire, error) {
	fields := bytes.Fields(line)
	if len(fields) != 3 {
		return harness.Fire{}, fmt.Errorf("%d fields, want 3", len(fields))
	}
	at, err := strconv.ParseInt(string(fields[1]), 10, 64)
	if err != nil {
		return harness.Fire{}, fmt.Errorf("fire time: %w", err)
	}
	due, err := strconv.ParseInt(string(fields[2]), 10, 64)
	if err != nil {
		return harness.Fire{}, fmt.Errorf("due time: %w", err)
	}
	f := harness.Fire{ID: string(fields[0]), At: time.Unix(0, at)}
	if due != 0 {
		f.Due = time.Unix(0, due)
	}
	return f, nil
}

// buildWorker builds the asynq-worker binary into workDir.
func buildWorker(ctx context.Context, moduleDir, workDir string) (string, error) {
	if moduleDir == "" {
		var err error
		if moduleDir, err = harness.ModuleDir(); err != nil {
			return "", fmt.Errorf("asynq: %w (or set Options.ModuleDir or Options.WorkerBin)", err)
		}
	}
	bin, err := filepath.Abs(filepath.Join(workDir, "asynq-worker"))
	if err != nil {
		return "", fmt.Errorf("asynq: worker path: %w", err)
	}
	if err := harness.GoBuild(ctx, moduleDir, bin, "github.com/ivrsched/ivrsched/bench/cmd/asynq-worker"); err != nil {
		return "", fmt.Errorf("asynq: %w", err)
	}
	return bin, nil
}
