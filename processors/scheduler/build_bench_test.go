package scheduler_test

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/localstore"
	"github.com/ivrsched/ivrsched/processors/scheduler"
	"github.com/ivrsched/ivrsched/topology"
)

// BenchmarkIndexBuild measures what a restart costs per pending follow-up
// after the store is restored: opening one partition's LevelDB store and
// building its due index with one scan (62,500 users with two follow-ups
// each, a partition's share of 1 M pending on 8 partitions).
func BenchmarkIndexBuild(b *testing.B) {
	const users, perUser = 62500, 2
	dir := b.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	build := func() *localstore.Stores { return localstore.New(dir, log) }
	s, err := scheduler.New(scheduler.Config{Topics: topology.NewTopics("bench-"), Partitions: 1, Storage: build().Builder(), Logger: log}, nil)
	if err != nil {
		b.Fatal(err)
	}
	table := string(topology.NewTopics("bench-").SchedulerTable())

	// Restore the partition once, as Goka would from the changelog.
	st, err := s.Punctuator().StorageBuilder(build().Builder())(table, 0)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.Open(); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	due := time.Now().Add(time.Hour)
	for u := range users {
		v := &pb.UserState{UserId: fmt.Sprint("user-", u), Phone: "+14155550123", TimeZone: "Europe/Berlin",
			OnboardedAt: timestamppb.Now()}
		for k := range perUser {
			v.Pending = append(v.Pending, &pb.Task{TaskId: fmt.Sprint("task-", k), DueAt: timestamppb.New(due.Add(time.Duration(rng.Int64N(int64(time.Hour))))),
				Payload: make([]byte, 64), Attempt: 1})
		}
		raw, err := proto.Marshal(v)
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Set(v.UserId, raw); err != nil {
			b.Fatal(err)
		}
		if err := st.SetOffset(int64(u)); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.MarkRecovered(); err != nil {
		b.Fatal(err)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	for b.Loop() {
		st, err := s.Punctuator().StorageBuilder(build().Builder())(table, 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Open(); err != nil {
			b.Fatal(err)
		}
		if err := st.MarkRecovered(); err != nil { // nothing to restore: builds the index
			b.Fatal(err)
		}
		b.StopTimer()
		if err := st.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(users*perUser), "ns/pending")
}
