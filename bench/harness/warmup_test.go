package harness

import (
	"context"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/kafkatest"
)

// Without a broker, ForTest alone starts one for this test and stops it
// when the test ends.
func TestWarmKafkaMovesRecordsThrough(t *testing.T) {
	addr := kafkatest.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := WarmKafka(ctx, []string{addr}, 2, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n < 1000 {
		t.Fatalf("warm-up moved %d records through the broker in 2 s; want thousands", n)
	}
	before, err := KafkaBackend{Brokers: []string{addr}, Pid: func() int { return 0 }}.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := before.Topics["ivrbench-warmup"]; got < n {
		t.Errorf("ivrbench-warmup holds %d records, fewer than the %d consumed", got, n)
	}
	// A second warm-up reuses the topic.
	if _, err := WarmKafka(ctx, []string{addr}, 2, 500*time.Millisecond); err != nil {
		t.Fatalf("second warm-up: %v", err)
	}
	t.Logf("warm-up: %d records in 2 s", n)
}
