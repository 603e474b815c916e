package scheduler

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/policy"
)

// benchPolicies are the two cases the issue compares: no policy, and the
// default policy with every call inside its window.
var benchPolicies = []struct {
	name string
	pol  *policy.Policy
}{{"no-policy", nil}, {"default-inside-window", policy.Default()}}

// BenchmarkApplyPolicy is what the policy adds to scheduling one
// follow-up: its effective time, from the user's zone (kept in the value)
// and the policy.
func BenchmarkApplyPolicy(b *testing.B) {
	st := &pb.UserState{UserId: "u", Phone: "+4915112345678", Region: "DE", PhoneZones: []string{"Europe/Berlin"}}
	due := timestamppb.New(time.Date(2026, 6, 10, 10, 0, 0, 0, time.UTC))
	from := due.AsTime().Add(-time.Hour)
	s := &Scheduler{}
	for _, c := range benchPolicies {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				t := &pb.Task{TaskId: "a", DueAt: due, Attempt: 1}
				if _, _, err := s.applyPolicy(c.pol, st, t, from); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMayFire is what the policy adds to firing one follow-up: a
// version comparison, or, for one computed under an older policy, an
// Effective at its due time.
func BenchmarkMayFire(b *testing.B) {
	st := &pb.UserState{UserId: "u", Phone: "+4915112345678", Region: "DE", PhoneZones: []string{"Europe/Berlin"}}
	p := policy.Default()
	due := timestamppb.New(time.Date(2026, 6, 10, 10, 0, 0, 0, time.UTC))
	for _, c := range []struct {
		name    string
		version string
	}{{"same-version", p.Version()}, {"older-version", "0123456789abcdef"}} {
		t := &pb.Task{TaskId: "a", DueAt: due, RequestedAt: due, Attempt: 1, PolicyVersion: c.version}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if !mayFire(p, st, t) {
					b.Fatal("may not fire")
				}
			}
		})
	}
}
