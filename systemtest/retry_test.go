package systemtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/topology"
)

// retryBackoff is the test policy's delay before a no-answer is called
// again, shortened by up to a fifth (its jitter).
const retryBackoff = 3 * time.Second

// Retries driven by the outcome, on Apache Kafka through the binary: a
// policy that retries a no-answer is set on a running `ivrsched run`; the
// provider answers each user's first call "no answer" and the next one
// "answered". Each follow-up is called twice, under two call ids (attempts
// 1 and 2), the second at least the backoff after the first; and
// followup-events carries, per follow-up, one retry and exactly one final
// outcome (answered).
func TestRetryAfterNoAnswer(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 4
	prov := newProvider(t)
	prov.answer = func(c *pb.IVRCall, before []request) string {
		for _, q := range before {
			if q.call.GetUserId() == c.GetUserId() {
				return `{"outcome":"answered"}`
			}
		}
		return `{"outcome":"NO_ANSWER","detail":"rang 30 s"}`
	}
	ivr := start(t, "run", append([]string{"run", "--http", ""}, roleArgs(t, brokers, pfx, parts, "--provider", "webhook", "--webhook-url", prov.url())...)...)
	waitLog(t, ivr, "calling policy in force", 60*time.Second)

	file := filepath.Join(t.TempDir(), "policy.yaml")
	doc := fmt.Sprintf(`default:
  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: "00:00", to: "24:00"}]
  retry:
    max_attempts: 3
    max_age: 1h
    no-answer: {delay: %s, jitter: 0.2}
`, retryBackoff)
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "policy", "set", "-f", file, "--brokers", brokers, "--topic-prefix", pfx).CombinedOutput()
	if err != nil {
		t.Fatalf("policy set: %v\n%s", err, out)
	}
	version := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "# policy set, version"))
	waitLog(t, ivr, "version="+version, 30*time.Second)

	const users = 20
	plan := spread(users, 1, time.Now().Add(time.Second), 2*time.Second)
	schedule(t, brokers, pfx, parts, plan)

	// Both attempts of every follow-up placed.
	deadline := time.Now().Add(60 * time.Second)
	var reqs []request
	for {
		prov.mu.Lock()
		reqs = append(reqs[:0], prov.reqs...)
		prov.mu.Unlock()
		if len(reqs) >= 2*users {
			break
		}
		if err := ivr.exited(); err != nil || time.Now().After(deadline) {
			t.Fatalf("%d of %d calls placed (%v)", len(reqs), 2*users, err)
		}
		select {
		case <-prov.news:
		case <-time.After(time.Second):
		}
	}
	byUser := map[string][]request{}
	for _, q := range reqs {
		byUser[q.call.GetUserId()] = append(byUser[q.call.GetUserId()], q)
	}
	var gaps []time.Duration
	for user := range plan {
		q := byUser[user]
		if len(q) != 2 {
			t.Errorf("%s called %d times, want 2", user, len(q))
			continue
		}
		first, second := q[0], q[1]
		gap := second.at.Sub(first.at)
		gaps = append(gaps, gap)
		switch {
		case first.call.GetAttempt() != 1 || second.call.GetAttempt() != 2:
			t.Errorf("%s: attempts %d, %d", user, first.call.GetAttempt(), second.call.GetAttempt())
		case first.call.GetCallId() == second.call.GetCallId() || second.key != second.call.GetCallId():
			t.Errorf("%s: call ids %s, %s (key %s)", user, first.call.GetCallId(), second.call.GetCallId(), second.key)
		case first.call.GetTaskId() != second.call.GetTaskId():
			t.Errorf("%s: tasks %s, %s", user, first.call.GetTaskId(), second.call.GetTaskId())
		case gap < retryBackoff*4/5:
			t.Errorf("%s: attempt 2 placed %v after attempt 1, before the backoff (%v less a fifth)", user, gap, retryBackoff)
		}
	}

	// followup-events: one retry and one final outcome per follow-up, read
	// to the end of the topic once every final outcome is there.
	events := string(topology.NewTopics(pfx).Events)
	answered := 0
	kafkatest.Consume(t, brokers, events, saramaConfig(), 60*time.Second, func(m *sarama.ConsumerMessage) bool {
		var e pb.ScheduleEvent
		if proto.Unmarshal(m.Value, &e) == nil && e.GetKind() == pb.ScheduleEvent_KIND_ANSWERED {
			answered++
		}
		return answered == users
	})
	kinds := map[string]map[pb.ScheduleEvent_Kind]int{}
	for _, m := range readToEnd(t, brokers, events) {
		var e pb.ScheduleEvent
		if err := proto.Unmarshal(m.Value, &e); err != nil {
			t.Fatal(err)
		}
		if kinds[e.GetUserId()] == nil {
			kinds[e.GetUserId()] = map[pb.ScheduleEvent_Kind]int{}
		}
		kinds[e.GetUserId()][e.GetKind()]++
		if e.GetKind() == pb.ScheduleEvent_KIND_RETRY && e.GetReason() != "no-answer" {
			t.Errorf("retry event %v", &e)
		}
	}
	for user := range plan {
		k := kinds[user]
		if k[pb.ScheduleEvent_KIND_RETRY] != 1 || k[pb.ScheduleEvent_KIND_ANSWERED] != 1 || len(k) != 2 {
			t.Errorf("%s: events %v, want one KIND_RETRY and one KIND_ANSWERED", user, k)
		}
	}
	minGap, maxGap := gaps[0], gaps[0]
	for _, g := range gaps {
		minGap, maxGap = min(minGap, g), max(maxGap, g)
	}
	t.Logf("%d follow-ups: attempt 1 no-answer, attempt 2 answered under a new call id, %v to %v after attempt 1 (backoff %v, jitter 0.2); one retry and one final event each",
		users, minGap.Round(time.Millisecond), maxGap.Round(time.Millisecond), retryBackoff)
}

// readToEnd reads a topic from the start up to its end as it is now.
func readToEnd(t *testing.T, brokers, topic string) []*sarama.ConsumerMessage {
	t.Helper()
	client, err := sarama.NewClient(strings.Split(brokers, ","), saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, p := range parts {
		newest, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		want += int(newest - oldest)
	}
	if want == 0 {
		return nil
	}
	return consumeAll(t, brokers, topic, want, 30*time.Second)
}
