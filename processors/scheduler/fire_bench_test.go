package scheduler_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/app/metrics"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/policy"
	"github.com/ivrsched/ivrsched/processors/scheduler"
	"github.com/ivrsched/ivrsched/topology"
)

// BenchmarkFire measures what firing costs the scheduler per follow-up:
// a tick that takes 1,000 due follow-ups from the due index, reads their
// users' values and publishes their calls (Goka's tester, in memory, so
// the broker's share is not in it), without metrics and with the fire
// lateness histogram observed per fire (the counters are the scheduler's
// Stats, incremented either way; the gauges are read at scrape time). It
// reports the wall time and the process's CPU time per fire, which a
// machine busy with other work disturbs less.
func BenchmarkFire(b *testing.B) {
	for _, withMetrics := range []bool{false, true} {
		b.Run(fmt.Sprintf("metrics=%v", withMetrics), func(b *testing.B) { benchFire(b, withMetrics) })
	}
}

func benchFire(b *testing.B, withMetrics bool) {
	const batch = 1000
	tt := tester.New(b)
	clk := clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	topics := topology.NewTopics("")
	cfg := scheduler.Config{Topics: topics, Storage: tt.StorageBuilder(), Clock: clk,
		Policy: func() *policy.Policy { return nil }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if withMetrics {
		cfg.Lateness = metrics.FireLateness()
	}
	s, err := scheduler.New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	proc, err := s.Processor(nil, goka.WithTester(tt), goka.WithLogger(quiet{}))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	calls := tt.NewQueueTracker(string(topics.Calls))
	tickKey := topology.TickKeys(1)[0]
	fired := 0
	var cpu time.Duration
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		for u := range batch {
			user := fmt.Sprintf("user-%d-%d", i, u)
			tt.Consume(string(topics.Onboarding), user, &pb.Command{UserId: user, RequestedAt: timestamppb.New(clk.Now()),
				Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: "+4915112345678", TimeZone: "Europe/Berlin",
					FollowUps: []*pb.FollowUp{{TaskId: "call", When: &pb.FollowUp_Delay{Delay: durationpb.New(time.Second)},
						Action: &pb.Action{IvrScript: "welcome"}, Payload: make([]byte, 64)}}}}}, tester.WithTime(clk.Now()))
		}
		clk.Advance(2 * time.Second)
		before := cpuTime(b)
		b.StartTimer()
		tt.Consume(string(topics.Ticks), tickKey, &pb.Tick{Partition: 0, SentAt: timestamppb.New(clk.Now())})
		b.StopTimer()
		cpu += cpuTime(b) - before
		for {
			if _, _, ok := calls.Next(); !ok {
				break
			}
			fired++
		}
	}
	if fired != b.N*batch {
		b.Fatalf("fired %d, want %d", fired, b.N*batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(fired), "ns/fire")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(fired), "cpu-ns/fire")
}

// cpuTime is the CPU time the process used so far (user and system): on a
// machine shared with other work it varies less than the wall time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// quiet drops Goka's log lines.
type quiet struct{}

func (quiet) Print(...any)          {}
func (quiet) Println(...any)        {}
func (quiet) Printf(string, ...any) {}
