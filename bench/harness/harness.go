// Package harness runs one workload against several delayed-task systems and
// measures them the same way: what each system fires is observed by the
// harness (a consumer of its output topic, or its own handler) and compared
// with what was scheduled.
package harness

import (
	"context"
	"log/slog"
	"slices"
	"time"
)

// Task is one follow-up to schedule.
type Task struct {
	ID      string // unique across the run
	User    string // several tasks share a user
	Due     time.Time
	Payload []byte
}

// Fire is one observed firing of a task.
type Fire struct {
	ID  string
	At  time.Time // when the harness saw it (wall clock of this machine)
	Due time.Time // the due time the system carried, if it carries one (else zero)
}

// Env is what the harness provides to every system.
type Env struct {
	// KafkaBrokers is the bootstrap address of the Apache Kafka broker (or
	// the embedded broker) the Kafka-based systems share.
	KafkaBrokers string
	// RedisAddr is the address of a redis-server the harness started.
	RedisAddr string
	// WorkDir is an empty directory the system may use.
	WorkDir string
	// Partitions is the partition count of the topics a system creates.
	Partitions int
	Log        *slog.Logger
}

// System is a delayed-task system under test.
//
// The harness calls Start, then Observe (in its own goroutine), then
// Schedule; it waits for the fires; it may call Crash and Recover; at the
// end it calls Stop. Every method must return when ctx ends.
type System interface {
	// Name is short and unique, e.g. "ivrsched-kafka", "asynq-100ms".
	Name() string
	// Start starts the system's own processes or goroutines and returns once
	// it can accept tasks.
	Start(ctx context.Context, env Env) error
	// Schedule submits the tasks and returns once the system has accepted
	// all of them (acknowledged by its store or broker).
	Schedule(ctx context.Context, tasks []Task) error
	// Observe sends every fire the system makes to out until ctx ends.
	// Duplicates must be sent too: the harness counts them.
	Observe(ctx context.Context, out chan<- Fire) error
	// PIDs are the operating-system processes the system runs, for CPU and
	// memory accounting (the harness's own process if it runs in-process).
	// Shared servers (Kafka, Redis) are accounted for separately.
	PIDs() []int
	// Crash kills the system as kill -9 would; Recover starts it again.
	Crash() error
	Recover(ctx context.Context) error
	// Stop stops everything Start started.
	Stop() error
}

// Placer is a system whose fires pass one more stage before they take
// effect: ivrsched's scheduler fires a call to ivr-calls, its dialer places
// it. Observe reports the fires, comparable with the other systems' fires;
// ObservePlaced reports the placements (a duplicate there is a call placed
// twice). The harness measures both.
type Placer interface {
	ObservePlaced(ctx context.Context, out chan<- Fire) error
}

// Floor is the run's one-hop floor (a record produced at its due time and
// observed as the systems' fires are): the other systems' lateness is also
// reported as a ratio to its lateness in the same run. It has no process to
// kill: the harness skips its kill -9 phase.
type Floor interface {
	Floor() bool
}

// IsFloor reports whether s is a Floor.
func IsFloor(s System) bool {
	f, ok := s.(Floor)
	return ok && f.Floor()
}

// Rotated is xs in the order of repetition rep (from 0): rotated left by
// rep, so that over the repetitions no element always runs first (right
// after what ran before the phase) or after the same neighbour.
func Rotated[T any](xs []T, rep int) []T {
	k := rep % max(len(xs), 1)
	return slices.Concat(xs[k:], xs[:k])
}
