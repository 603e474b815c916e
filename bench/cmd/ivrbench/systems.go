package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/ivrsched/ivrsched/bench/harness"
	"github.com/ivrsched/ivrsched/bench/systems/ivrsched"
)

// entry is one system the benchmark can run.
type entry struct {
	name    string
	backend string // kafka, redis or embedded
	make    func() harness.System
}

var registry = []entry{
	{"ivrsched-kafka", "kafka", func() harness.System { return ivrsched.New("ivrsched-kafka", ivrsched.OneProcess) }},
	{"ivrsched-kafka-procs", "kafka", func() harness.System { return ivrsched.New("ivrsched-kafka-procs", ivrsched.Processes) }},
	{"ivrsched-embedded", "embedded", func() harness.System { return ivrsched.New("ivrsched-embedded", ivrsched.Embedded) }},
}

func names() []string {
	var out []string
	for _, e := range registry {
		out = append(out, e.name)
	}
	return out
}

func choose(list string) ([]entry, error) {
	if list == "all" {
		return registry, nil
	}
	var out []entry
	for _, n := range strings.Split(list, ",") {
		found := false
		for _, e := range registry {
			if e.name == strings.TrimSpace(n) {
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

// startRedis is replaced when the asynq baseline lands.
var startRedis = func(ctx context.Context, dir string) (addr string, pid int, stop func() error, err error) {
	return "", 0, nil, fmt.Errorf("no redis support built in")
}
