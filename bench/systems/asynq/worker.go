package asynq

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"time"

	"github.com/hibiken/asynq"
)

// TaskType is the asynq task type of a follow-up.
const TaskType = "followup"

// readyLine is what the worker prints once its asynq.Server has started.
const readyLine = "ready"

// EncodePayload prefixes the harness payload with the due time (8 bytes,
// big-endian Unix nanoseconds), so the worker can report it.
func EncodePayload(due time.Time, payload []byte) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint64(b, uint64(due.UnixNano()))
	return append(b, payload...)
}

// DecodeDue returns the due time EncodePayload put in p (Unix nanoseconds).
func DecodeDue(p []byte) (int64, error) {
	if len(p) < 8 {
		return 0, fmt.Errorf("payload of %d bytes has no due time", len(p))
	}
	return int64(binary.BigEndian.Uint64(p)), nil
}

// WorkerConfig configures RunWorker (the asynq-worker binary's flags).
type WorkerConfig struct {
	RedisAddr string
	Queue     string
	// CheckInterval sets both asynq polling intervals:
	// Config.DelayedTaskCheckInterval (the forwarder moving due tasks from
	// the scheduled set to the pending list, default 5 s) and
	// Config.TaskCheckInterval (how long a processor sleeps, 0.5-1.5 times
	// this, when the queues are empty, default 1 s). 0 keeps asynq's defaults.
	CheckInterval time.Duration
	// TaskCheckInterval, if not 0, overrides CheckInterval for
	// Config.TaskCheckInterval alone.
	TaskCheckInterval time.Duration
	// Concurrency is Config.Concurrency; 0 keeps asynq's default (NumCPU).
	Concurrency int
}

// Validate reports a config RunWorker cannot use.
func (c WorkerConfig) Validate() error {
	switch {
	case c.RedisAddr == "":
		return errors.New("redis address is empty")
	case c.Queue == "":
		return errors.New("queue is empty")
	case c.CheckInterval < 0 || c.TaskCheckInterval < 0:
		return errors.New("negative check interval")
	case c.Concurrency < 0:
		return fmt.Errorf("negative concurrency %d", c.Concurrency)
	}
	return nil
}

// RunWorker runs an asynq.Server until ctx ends. It writes "ready" to out
// once the server runs, then one line per task handled:
//
//	<task id> <unix nanos when the handler ran> <due unix nanos>
//
// A handler returns only after its line was written to out (group commit:
// one write for all lines ready at that moment), so a task asynq counts as
// done has been reported even if the process is killed right after.
func RunWorker(ctx context.Context, cfg WorkerConfig, out io.Writer, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("worker config: %w", err)
	}
	taskCheck := cfg.CheckInterval
	if cfg.TaskCheckInterval != 0 {
		taskCheck = cfg.TaskCheckInterval
	}
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: cfg.RedisAddr}, asynq.Config{
		Concurrency:              cfg.Concurrency,
		Queues:                   map[string]int{cfg.Queue: 1},
		DelayedTaskCheckInterval: cfg.CheckInterval,
		TaskCheckInterval:        taskCheck,
		LogLevel:                 asynq.WarnLevel,
	})
	w := newGroupWriter(out)
	handler := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		at := time.Now().UnixNano()
		id, _ := asynq.GetTaskID(ctx)
		due, err := DecodeDue(t.Payload())
		if err != nil {
			log.Warn("task without due time", "id", id, "err", err)
		}
		line := make([]byte, 0, len(id)+42)
		line = append(line, id...)
		line = append(line, ' ')
		line = strconv.AppendInt(line, at, 10)
		line = append(line, ' ')
		line = strconv.AppendInt(line, due, 10)
		line = append(line, '\n')
		return w.write(line)
	})
	if err := srv.Start(handler); err != nil {
		w.close()
		return fmt.Errorf("start asynq server: %w", err)
	}
	if err := w.write([]byte(readyLine + "\n")); err != nil {
		srv.Shutdown()
		w.close()
		return err
	}
	log.Info("asynq worker running", "redis", cfg.RedisAddr, "queue", cfg.Queue,
		"check_interval", cfg.CheckInterval, "task_check_interval", taskCheck, "concurrency", cfg.Concurrency)
	<-ctx.Done()
	srv.Shutdown() // waits for running handlers (Config.ShutdownTimeout, 8 s)
	w.close()
	return nil
}

// groupWriter writes lines for many goroutines with one write per batch.
type groupWriter struct {
	reqs chan lineReq
	done chan struct{}
}

type lineReq struct {
	line []byte
	done chan error
}

func newGroupWriter(out io.Writer) *groupWriter {
	w := &groupWriter{reqs: make(chan lineReq, 1024), done: make(chan struct{})}
	go w.run(out)
	return w
}

// write returns once line was written to out.
func (w *groupWriter) write(line []byte) error {
	req := lineReq{line: line, done: make(chan error, 1)}
	w.reqs <- req
	if err := <-req.done; err != nil {
		return fmt.Errorf("write fire line: %w", err)
	}
	return nil
}

func (w *groupWriter) close() {
	close(w.reqs)
	<-w.done
}

func (w *groupWriter) run(out io.Writer) {
	defer close(w.done)
	buf := make([]byte, 0, 64<<10)
	var waiting []chan error
	for req := range w.reqs {
		buf = append(buf[:0], req.line...)
		waiting = append(waiting[:0], req.done)
	batch:
		for len(buf) < 60<<10 {
			select {
			case r, ok := <-w.reqs:
				if !ok {
					break batch
				}
				buf = append(buf, r.line...)
				waiting = append(waiting, r.done)
			default:
				break batch
			}
		}
		_, err := out.Write(buf)
		for _, c := range waiting {
			c <- err
		}
	}
}
