package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ivrsched/ivrsched/bench/harness"
	"github.com/ivrsched/ivrsched/bench/systems/asynq"
	"github.com/ivrsched/ivrsched/bench/systems/etf1"
	"github.com/ivrsched/ivrsched/bench/systems/floor"
	"github.com/ivrsched/ivrsched/bench/systems/ivrsched"
	"github.com/ivrsched/ivrsched/bench/systems/reenqueue"
)

// entry is one system the benchmark can run.
type entry struct {
	name    string
	backend string // kafka, redis or embedded
	// make returns the system named name: the entry's name in the first
	// repetition, with a suffix in the others, so that each run has topics
	// (and queues, groups) of its own.
	make func(name string) harness.System
}

var registry = []entry{
	{"kafka-floor", "kafka", func(n string) harness.System { return floor.New(n) }},
	{"ivrsched-kafka", "kafka", func(n string) harness.System { return ivrsched.New(n, ivrsched.OneProcess) }},
	// The scheduler alone, as deployed with its dialers on other machines:
	// the same fires as ivrsched-kafka's without the dialer's work on the
	// same two cores (and no placements).
	{"ivrsched-kafka-sched", "kafka", func(n string) harness.System { return ivrsched.NewSchedulerOnly(n) }},
	{"ivrsched-kafka-procs", "kafka", func(n string) harness.System { return ivrsched.New(n, ivrsched.Processes) }},
	{"ivrsched-kafka-flush5ms", "kafka", func(n string) harness.System {
		return ivrsched.New(n, ivrsched.OneProcess, "--flush", "5ms")
	}},
	{"ivrsched-kafka-tick10ms", "kafka", func(n string) harness.System {
		return ivrsched.New(n, ivrsched.OneProcess, "--tick-gap", "10ms")
	}},
	// At etf1's precision: a partition ticks at most once a second, so a
	// second's follow-ups fire together, up to a second late (etf1 fires
	// them up to a second early). What a fire costs when it may wait.
	{"ivrsched-kafka-tick1s", "kafka", func(n string) harness.System {
		return ivrsched.New(n, ivrsched.OneProcess, "--tick-gap", "1s")
	}},
	{"ivrsched-kafka-sched-tick1s", "kafka", func(n string) harness.System {
		return ivrsched.NewSchedulerOnly(n, "--tick-gap", "1s")
	}},
	// The default calling policy (08:00 to 21:00 in the user's local time)
	// with every user in a zone where it is daytime: its cost when every
	// call is inside the window.
	{"ivrsched-kafka-window", "kafka", func(n string) harness.System {
		return ivrsched.New(n, ivrsched.OneProcess, "--default-policy", "window").WithTimeZone(ivrsched.DaytimeZone(time.Now()))
	}},
	// A do-not-call list of 1,000,000 entries, read before the first phase:
	// each fire and each placement checks the list.
	{"ivrsched-kafka-dnc1m", "kafka", func(n string) harness.System {
		return ivrsched.New(n, ivrsched.OneProcess).WithSuppressions(1_000_000)
	}},
	{"ivrsched-embedded", "embedded", func(n string) harness.System { return ivrsched.New(n, ivrsched.Embedded) }},
	{"asynq-default", "redis", func(n string) harness.System { return asynq.New(n, asynq.Options{}) }},
	{"asynq-100ms", "redis", func(n string) harness.System {
		return asynq.New(n, asynq.Options{CheckInterval: 100 * time.Millisecond})
	}},
	{"etf1-default-log", "kafka", func(n string) harness.System { return etf1.New(n, etf1.Options{}) }},
	{"etf1-warn-log", "kafka", func(n string) harness.System { return etf1.New(n, etf1.Options{LogLevel: "warn"}) }},
	{"reenqueue-immediate", "kafka", func(n string) harness.System { return reenqueue.New(n, reenqueue.Immediate) }},
	{"reenqueue-hold60s", "kafka", func(n string) harness.System { return reenqueue.New(n, reenqueue.Hold60s) }},
}

func names() []string {
	var out []string
	for _, e := range registry {
		out = append(out, e.name)
	}
	return out
}

func choose(list string) ([]entry, error) {
	switch list {
	case "all":
		return registry, nil
	case "none":
		return nil, nil
	}
	var out []entry
	seen := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if seen[n] {
			return nil, fmt.Errorf("-systems: %q is listed twice (its runs would share topics and ids; use -repeat to run it again)", n)
		}
		seen[n] = true
		found := false
		for _, e := range registry {
			if e.name == n {
				out = append(out, e)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("-systems: unknown system %q (want some of %s)", n, strings.Join(names(), ","))
		}
	}
	return out, nil
}

// chose reports whether the system name is among es.
func chose(es []entry, name string) bool {
	return slices.ContainsFunc(es, func(e entry) bool { return e.name == name })
}

func needs(es []entry, backend string) bool {
	for _, e := range es {
		if e.backend == backend {
			return true
		}
	}
	return false
}

// embeddedBackend measures the embedded broker inside ivrsched's process:
// records and bytes; its CPU is already the process's.
func embeddedBackend(s harness.System) harness.Backend {
	is := s.(*ivrsched.System)
	return lazyKafka{is}
}

type lazyKafka struct{ s *ivrsched.System }

func (l lazyKafka) PID() int { return 0 }
func (l lazyKafka) Counters(ctx context.Context) (harness.Counters, error) {
	return harness.KafkaBackend{Brokers: []string{l.s.Broker()}, DataDir: l.s.EmbeddedDataDir(), Pid: func() int { return 0 }}.Counters(ctx)
}

// startRedis runs a redis-server for the asynq systems.
func startRedis(ctx context.Context, dir string) (addr string, pid func() int, stop func() error, err error) {
	r, err := asynq.RunRedis(ctx, asynq.RedisOptions{Dir: dir})
	if err != nil {
		return "", nil, nil, err
	}
	return r.Addr, r.PID, r.Stop, nil
}

// scaleArgs are extra flags of the scale phase's ivrsched (set by tests of
// the benchmark itself, e.g. to profile it).
var scaleArgs = strings.Fields(os.Getenv("IVRBENCH_SCALE_ARGS"))
