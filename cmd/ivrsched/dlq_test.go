package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// Dead letters you can act on, on `ivrsched run`: a follow-up the calling
// policy allows no call for (no_opening) and an invalid phone number are
// dead-lettered; `dlq list` shows them with the number masked; a replay of
// the invalid number fails again, comes back marked, and is not replayed
// again; once the policy allows calls, a replay of the other places its call.
func TestDLQListAndReplay(t *testing.T) {
	r := startRun(t)
	cli, setPolicy := r.cli, r.setPolicy
	type line struct {
		Reason string `json:"reason"`
		Detail string `json:"detail"`
		Source struct {
			Topic string `json:"topic"`
		} `json:"source"`
		Key       string `json:"key"`
		Replays   int    `json:"replays"`
		Truncated bool   `json:"truncated"`
		ValueSize int    `json:"value_size"`
		Replayed  bool   `json:"replayed"`
		Skipped   string `json:"skipped"`
	}
	lines := func(out string) []line {
		t.Helper()
		var ls []line
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("line %q: %v", sc.Text(), err)
			}
			if l.Reason != "" {
				ls = append(ls, l)
			}
		}
		return ls
	}
	// Waits until `dlq list args` shows n dead letters.
	await := func(n int, args ...string) []line {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; {
			ls := lines(cli(append([]string{"dlq", "list"}, args...)...))
			if len(ls) == n {
				return ls
			}
			if time.Now().After(deadline) {
				t.Fatalf("dlq list %v: %d dead letters, want %d: %+v", args, len(ls), n, ls)
			}
			time.Sleep(50 * time.Millisecond) // dead letters have no event to await here
		}
	}

	// Blackouts over the next two years: no opening within 400 days.
	today := time.Now().UTC()
	day := func(d int) string { return today.AddDate(0, 0, d).Format("2006-01-02") }
	setPolicy(fmt.Sprintf("default:\n  blackouts:\n    - {name: a, from: %s, to: %s}\n    - {name: b, from: %s, to: %s}\n", day(-2), day(360), day(361), day(720)))
	cli("onboard", "--user", "blocked", "--phone", "+14155550123", "--task", "t1", "--delay", "1s")

	// An invalid number, produced as any client could (the CLI refuses it).
	cfg := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: []string{r.broker}, FlushFrequency: time.Millisecond}
	p, err := sarama.NewSyncProducer(cfg.Brokers, cfg.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	bad, _ := proto.Marshal(&pb.Command{UserId: "badphone", RequestedAt: timestamppb.Now(), Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
		Phone: "+1415555012", FollowUps: []*pb.FollowUp{{TaskId: "t1", When: &pb.FollowUp_Delay{Delay: durationpb.New(time.Second)}}}}}})
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "onboarding", Key: sarama.StringEncoder("badphone"), Value: sarama.ByteEncoder(bad),
		Headers: []sarama.RecordHeader{{Key: []byte("trace"), Value: []byte("abc")}}}); err != nil {
		t.Fatal(err)
	}

	all := await(2)
	for _, l := range all {
		if l.Source.Topic != "onboarding" || l.Replays != 0 || strings.Contains(l.Detail, "1415555012") {
			t.Errorf("dead letter %+v: want source onboarding, no replays, the number masked", l)
		}
	}
	if ls := await(1, "--reason", "no_opening"); ls[0].Key != "blocked" {
		t.Fatalf("no_opening: %+v", ls)
	}
	if ls := await(0, "--since", "2030-01-01T00:00:00Z"); len(ls) != 0 {
		t.Fatalf("--since in the future: %+v", ls)
	}

	// The invalid number fails again: dead-lettered with the mark.
	out := cli("dlq", "replay", "--reason", "invalid_phone")
	if ls := lines(out); len(ls) != 1 || !ls[0].Replayed || !strings.Contains(out, `{"replayed_total":1,"skipped_total":0}`) {
		t.Fatalf("first replay:\n%s", out)
	}
	again := await(2, "--reason", "invalid_phone")
	if again[1].Replays != 1 || again[1].Key != "badphone" {
		t.Fatalf("the replayed record failed again without its mark: %+v", again)
	}
	// Replaying again neither replays the original (done before) nor the
	// record that failed again after a replay.
	out = cli("dlq", "replay", "--reason", "invalid_phone")
	if ls := lines(out); len(ls) != 1 || ls[0].Replayed || !strings.Contains(ls[0].Skipped, "failed again") || !strings.Contains(out, `{"replayed_total":0,"skipped_total":1}`) {
		t.Fatalf("second replay:\n%s", out)
	}

	// The cause fixed: a policy open at all hours. The replay goes through,
	// and the call is placed.
	setPolicy("default:\n  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: \"00:00\", to: \"24:00\"}]\n")
	out = cli("dlq", "replay", "--reason", "no_opening")
	if !strings.Contains(out, `{"replayed_total":1,"skipped_total":0}`) {
		t.Fatalf("replay after the fix:\n%s", out)
	}
	calls := cli("calls", "--limit", "1", "--since", "1m")
	if !strings.Contains(calls, `"user_id":"blocked"`) {
		t.Fatalf("no call for the replayed follow-up: %s", calls)
	}
	if ls := await(3); len(ls) != 3 {
		t.Fatalf("the replay that succeeded was dead-lettered: %+v", ls)
	}

	// A command near 1 MiB that is rejected (too many follow-ups) is too
	// large to keep in its dead letter: listed as truncated with its size,
	// and not replayed, with where to find the original.
	follow := make([]*pb.FollowUp, 1001)
	for i := range follow {
		follow[i] = &pb.FollowUp{TaskId: fmt.Sprintf("t%d", i), When: &pb.FollowUp_Delay{Delay: durationpb.New(time.Hour)},
			Action: &pb.Action{IvrScript: strings.Repeat("s", 1000)}}
	}
	cmd := &pb.Command{UserId: "huge", RequestedAt: timestamppb.Now(), Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
		Phone: "+14155550123", FollowUps: follow}}}
	// Up to 100 bytes short of what the producer takes.
	room := sarama.NewConfig().Producer.MaxMessageBytes - 100 - proto.Size(cmd)
	for _, f := range follow {
		f.Action.IvrScript += strings.Repeat("s", room/len(follow))
	}
	follow[0].Action.IvrScript += strings.Repeat("s", room%len(follow))
	huge, _ := proto.Marshal(cmd)
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "onboarding", Key: sarama.StringEncoder("huge"), Value: sarama.ByteEncoder(huge)}); err != nil {
		t.Fatal(err)
	}
	if ls := await(1, "--reason", "too_many_follow_ups"); !ls[0].Truncated || ls[0].ValueSize != len(huge) || ls[0].Key != "huge" {
		t.Fatalf("dead letter of a %d-byte command: %+v, want truncated with its size", len(huge), ls[0])
	}
	out = cli("dlq", "replay", "--reason", "too_many_follow_ups")
	if ls := lines(out); len(ls) != 1 || ls[0].Replayed || !strings.Contains(ls[0].Skipped, "the original is at onboarding/") {
		t.Fatalf("replay of a truncated dead letter:\n%s", out)
	}
	r.stop()
}

// Flag errors of the operator commands: exit 2, one line naming the flag.
func TestOperateFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq"}, "want a subcommand"},
		{[]string{"dlq", "show"}, `unknown subcommand "show"`},
		{[]string{"dlq", "list", "--since", "yesterday"}, `--since: "yesterday"`},
		{[]string{"dlq", "list", "--since", "-2h"}, "--since: -2h0m0s"},
		{[]string{"dlq", "replay", "--max-replays", "0"}, "--max-replays: 0"},
		{[]string{"run-now", "--user", "u"}, "--task: required"},
		{[]string{"show"}, "--user: required"},
		{[]string{"upcoming", "--limit", "0"}, "--limit: 0"},
		{[]string{"upcoming", "--from", "soon"}, `--from: "soon"`},
		{[]string{"pause"}, "--campaign: required"},
		{[]string{"pause", "--campaign", "c", "--for", "0s"}, "--for: 0s"},
		{[]string{"pause", "--campaign", "c", "--for", "9000h"}, "--for: 9000h"},
		{[]string{"resume"}, "--campaign: required"},
		{[]string{"scheduler", "--admin-url", "ivrsched-0:9095"}, `--admin-url: "ivrsched-0:9095"`},
		{[]string{"run", "--admin-token-file", "/nonexistent/token", "--brokers", "127.0.0.1:1"}, "--admin-token-file: open /nonexistent/token"},
	} {
		var errb bytes.Buffer
		if code := realMain(context.Background(), c.args, io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

func TestProgressOnATerminalOnly(t *testing.T) {
	var b bytes.Buffer
	p := &progress{w: &b, what: "dlq replay", every: time.Hour}
	p.update(1, 4, "1 replayed")
	p.update(2, 4, "2 replayed") // within the interval: not shown
	p.update(4, 4, "3 replayed") // the end: shown
	p.done()
	if got := b.String(); got != "\rdlq replay: 1/4 (25%) 1 replayed\033[K\rdlq replay: 4/4 (100%) 3 replayed\033[K\n" {
		t.Fatalf("progress wrote %q", got)
	}
	quiet := &progress{what: "x"}
	quiet.update(1, 1, "")
	quiet.done() // no writer: nothing, no panic
}
