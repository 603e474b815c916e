package systemtest

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// The do-not-call list on Apache Kafka through the binary. A number put on
// the list with `ivrsched suppress add` while its follow-ups are pending is
// not called: each follow-up is reported KIND_SUPPRESSED on
// followup-events, once. A Forget of its user and a new onboarding (the
// same user id, and another one with the same number) do not lift it. An
// entry added with --until stops suppressing then: the follow-up due before
// it is reported, the one after it called. Another number is called as
// usual; `suppress check` and `list` answer without showing a number, and
// `remove` takes the number off the list.
func TestSuppressionList(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 4
	prov := newProvider(t)
	ivr := start(t, "run", append([]string{"run", "--http", ""}, roleArgs(t, brokers, pfx, parts, "--provider", "webhook", "--webhook-url", prov.url())...)...)
	waitLog(t, ivr, "calling policy in force", 60*time.Second)
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: strings.Split(brokers, ","), Partitions: parts, Replication: 1, FlushFrequency: 5 * time.Millisecond}
	topics := topology.NewTopics(pfx)
	const listed, limited, free = "+14155550101", "+14155550102", "+14155550103"
	onboard := func(user, number string, due map[string]time.Time) {
		t.Helper()
		ob := &pb.Onboard{Phone: number, TimeZone: "America/Chicago"}
		for task, at := range due {
			ob.FollowUps = append(ob.FollowUps, &pb.FollowUp{TaskId: task, When: &pb.FollowUp_DueAt{DueAt: timestamppb.New(at)}})
		}
		emitAll(t, k, topics.Onboarding, new(codec.Command), []keyed{{user, &pb.Command{UserId: user, RequestedAt: timestamppb.Now(), Command: &pb.Command_Onboard{Onboard: ob}}}})
	}
	cli := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(binary, append(args, "--brokers", brokers, "--topic-prefix", pfx, "--partitions", fmt.Sprint(parts))...).CombinedOutput()
		if err != nil {
			t.Fatalf("ivrsched %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if strings.Contains(string(out), "5550101") || strings.Contains(string(out), "5550102") {
			t.Errorf("ivrsched %s shows a number: %s", strings.Join(args, " "), out)
		}
		return string(out)
	}

	// waitSuppressed waits until n follow-ups are reported suppressed.
	waitSuppressed := func(n int) {
		t.Helper()
		for end := time.Now().Add(60 * time.Second); ; {
			var seen []string
			reported := map[followUp]bool{}
			for _, m := range readToEnd(t, brokers, string(topics.Events)) {
				var e pb.ScheduleEvent
				if proto.Unmarshal(m.Value, &e) == nil {
					seen = append(seen, e.GetUserId()+"/"+e.GetTaskId()+":"+e.GetKind().String())
					if e.GetKind() == pb.ScheduleEvent_KIND_SUPPRESSED {
						reported[followUp{e.GetUserId(), e.GetTaskId()}] = true
					}
				}
			}
			if len(reported) >= n {
				return
			}
			if err := ivr.exited(); err != nil || time.Now().After(end) {
				prov.mu.Lock()
				for _, q := range prov.reqs {
					seen = append(seen, "called "+q.call.GetUserId()+"/"+q.call.GetTaskId())
				}
				prov.mu.Unlock()
				t.Fatalf("%d of %d follow-ups reported suppressed (%v); events and calls: %v", len(reported), n, err, seen)
			}
			time.Sleep(200 * time.Millisecond) // followup-events is polled: the reports come from ticks
		}
	}

	// Pending follow-ups, then the number is listed before they are due.
	now := time.Now()
	onboard("listed", listed, map[string]time.Time{"a1": now.Add(10 * time.Second), "a2": now.Add(11 * time.Second)})
	onboard("free", free, map[string]time.Time{"c1": now.Add(10 * time.Second)})
	cli("suppress", "add", "--number", listed, "--reason", "opted out")
	if out := cli("suppress", "check", "--number", listed); !strings.Contains(out, "suppressed") || strings.Contains(out, "not suppressed") || !strings.Contains(out, `reason="opted out"`) {
		t.Fatalf("check: %s", out)
	}
	if out := cli("suppress", "check", "--number", free); !strings.Contains(out, "not suppressed") {
		t.Fatalf("check of an unlisted number: %s", out)
	}
	waitSuppressed(2) // a1 and a2, due after the entry was added
	// A Forget and a new onboarding, under the same and another user id.
	emitAll(t, k, topics.Onboarding, new(codec.Command), []keyed{{"listed", &pb.Command{UserId: "listed", RequestedAt: timestamppb.Now(), Command: &pb.Command_Forget{Forget: &pb.Forget{}}}}})
	onboard("listed", listed, map[string]time.Time{"a3": time.Now().Add(3 * time.Second)})
	onboard("listed-again", listed, map[string]time.Time{"a4": time.Now().Add(3 * time.Second)})
	// An entry that ends.
	cli("suppress", "add", "--number", limited, "--reason", "for a while", "--until", "8s")
	added := time.Now()
	onboard("limited", limited, map[string]time.Time{"b1": added.Add(2 * time.Second), "b2": added.Add(16 * time.Second)})

	// The calls that must be placed: c1 and b2 (the last due).
	deadline := time.Now().Add(60 * time.Second)
	for prov.requests() < 2 {
		if err := ivr.exited(); err != nil || time.Now().After(deadline) {
			t.Fatalf("%d of 2 calls placed (%v)", prov.requests(), err)
		}
		select {
		case <-prov.news:
		case <-time.After(time.Second):
		}
	}
	want := map[followUp]bool{{"listed", "a1"}: true, {"listed", "a2"}: true, {"listed", "a3"}: true, {"listed-again", "a4"}: true, {"limited", "b1"}: true}
	waitSuppressed(len(want))
	// Read to the end: every report, once, with the entry's reason and time.
	suppressed := map[followUp]int{}
	for _, m := range readToEnd(t, brokers, string(topics.Events)) {
		var e pb.ScheduleEvent
		if err := proto.Unmarshal(m.Value, &e); err != nil || e.GetKind() != pb.ScheduleEvent_KIND_SUPPRESSED {
			continue
		}
		f := followUp{e.GetUserId(), e.GetTaskId()}
		suppressed[f]++
		reason := map[bool]string{true: "for a while", false: "opted out"}[f.user == "limited"]
		if e.GetReason() != reason || e.GetSuppressedAt() == nil || e.GetCallId() == "" {
			t.Errorf("report %v", &e)
		}
		if f.user == "limited" && e.GetSuppressedUntil() == nil {
			t.Errorf("report without the entry's end: %v", &e)
		}
	}
	for f := range want {
		if suppressed[f] != 1 {
			t.Errorf("%v reported suppressed %d times, want once", f, suppressed[f])
		}
	}
	if len(suppressed) != len(want) {
		t.Errorf("suppressed %v, want %v", suppressed, want)
	}
	prov.mu.Lock()
	var called []followUp
	for _, q := range prov.reqs {
		called = append(called, followUp{q.call.GetUserId(), q.call.GetTaskId()})
	}
	prov.mu.Unlock()
	for _, f := range called {
		if f != (followUp{"free", "c1"}) && f != (followUp{"limited", "b2"}) {
			t.Errorf("%v was called", f)
		}
	}
	if out := cli("suppress", "list"); !strings.Contains(out, "# 2 entries") || !strings.Contains(out, "(ended)") {
		t.Errorf("list: %s", out)
	}
	cli("suppress", "remove", "--number", listed)
	if out := cli("suppress", "check", "--number", listed); !strings.Contains(out, "not suppressed") {
		t.Errorf("check after remove: %s", out)
	}
	t.Logf("5 follow-ups of listed numbers reported KIND_SUPPRESSED once each (across a Forget and two onboardings); the entry with --until 8s stopped suppressing; calls placed: %v", called)
}
