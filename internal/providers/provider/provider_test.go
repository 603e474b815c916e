package provider

import (
	"net/http"
	"testing"
	"time"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":     0,
		"2":    2 * time.Second,
		"-3":   0,
		"soon": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := RetryAfter(in, now); got != want {
			t.Errorf("Retry-After %q: %v, want %v", in, got, want)
		}
	}
}

func TestOutcomes(t *testing.T) {
	for in, want := range map[string]pb.Outcome{"no-answer": pb.Outcome_OUTCOME_NO_ANSWER, "OUTCOME_BUSY": pb.Outcome_OUTCOME_BUSY, " machine ": pb.Outcome_OUTCOME_MACHINE} {
		if got, ok := ParseOutcome(in); !ok || got != want {
			t.Errorf("%q: %v %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "unspecified", "sideways"} {
		if _, ok := ParseOutcome(in); ok {
			t.Errorf("%q parsed", in)
		}
	}
	if IsFinal(pb.Outcome_OUTCOME_RINGING) || IsFinal(pb.Outcome_OUTCOME_ANSWERED) || !IsFinal(pb.Outcome_OUTCOME_CANCELED) {
		t.Error("IsFinal")
	}
}
