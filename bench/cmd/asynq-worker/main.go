// Command asynq-worker runs the asynq server of the asynq baseline in its
// own process, so that its CPU and memory are measured apart from the
// harness. It prints "ready", then one line per handled task:
// "<task id> <unix nanos when the handler ran> <due unix nanos>".
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	asynqsys "github.com/ivrsched/ivrsched/bench/systems/asynq"
)

func main() {
	var cfg asynqsys.WorkerConfig
	flag.StringVar(&cfg.RedisAddr, "redis", "127.0.0.1:6379", "redis-server address")
	flag.StringVar(&cfg.Queue, "queue", "default", "asynq queue to process")
	flag.DurationVar(&cfg.CheckInterval, "check-interval", 0,
		"asynq DelayedTaskCheckInterval and TaskCheckInterval (0: asynq defaults, 5s and 1s)")
	flag.DurationVar(&cfg.TaskCheckInterval, "task-check-interval", 0,
		"asynq TaskCheckInterval alone (0: same as --check-interval)")
	flag.IntVar(&cfg.Concurrency, "concurrency", 0, "asynq Concurrency (0: number of CPUs)")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := asynqsys.RunWorker(ctx, cfg, os.Stdout, log); err != nil {
		fmt.Fprintln(os.Stderr, "asynq-worker:", err)
		os.Exit(1)
	}
}
