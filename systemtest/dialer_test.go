package systemtest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/internal/providers/twilio/twiliotest"
	"github.com/ivrsched/ivrsched/topology"
)

// produceCalls publishes calls to ivr-calls as the scheduler would, keyed
// by user, and returns them as the follow-ups the provider should see.
func produceCalls(t *testing.T, brokers, pfx string, partitions int, calls []*pb.IVRCall) map[followUp]time.Time {
	t.Helper()
	want := map[followUp]time.Time{}
	var recs []keyed
	for _, c := range calls {
		want[followUp{c.GetUserId(), c.GetTaskId()}] = c.GetDueAt().AsTime()
		recs = append(recs, keyed{c.GetUserId(), c})
	}
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: strings.Split(brokers, ","), Partitions: partitions, Replication: 1, FlushFrequency: 5 * time.Millisecond}
	emitAll(t, k, topology.NewTopics(pfx).Calls, new(codec.IVRCall), recs)
	return want
}

func ivrCalls(users, perUser int, script string) []*pb.IVRCall {
	due := timestamppb.New(time.Now().Add(-time.Second).Truncate(time.Millisecond))
	var out []*pb.IVRCall
	for i := range users * perUser {
		user, task := fmt.Sprintf("user-%04d", i%users), fmt.Sprintf("task-%d", i/users)
		out = append(out, &pb.IVRCall{CallId: user + "/" + task + "/1", UserId: user, TaskId: task, Phone: "+14155550100",
			DueAt: due, FiredAt: due, Attempt: 1, Action: &pb.Action{IvrScript: script}})
	}
	return out
}

// rate is the placements per second among the sorted times that fall in
// [from, to).
func rate(times []time.Time, from, to time.Time) (float64, int) {
	n := 0
	for _, at := range times {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds(), n
}

// A provider that takes 300 ms per call and allows 50 calls per second:
// 3,000 calls with --cps 50 --max-in-flight 100 go out at 50 ± 5 per second
// without a 429, before and after the dialer is killed with SIGKILL midway
// and restarted, and not above it after a second dialer joins at two
// thirds (the two share the 50 calls per second; their partitions' calls
// not answered at the rebalance are consumed again by their new owner). Every call is
// placed; the provider, which honours the idempotency key, places each key
// once (the raw repeats, requests the killed dialer sent without recording
// their answer, are counted); every call gets a final result on
// ivr-results.
func TestDialerPaceAndKill(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 8
	// Its bursts of up to 20 calls take the bunching of requests that a
	// busy machine delays between the dialer's token and the provider's
	// handler (the dialer itself saves up a fifth of a second, 10 calls); a
	// dialer above 50 calls per second would get 429 answers within
	// seconds.
	prov := newPacedProvider(t, 300*time.Millisecond, 50, 20)
	dialer := func(name, id string) *proc {
		return start(t, name, append([]string{"dialer"}, roleArgs(t, brokers, pfx, parts,
			"--instance-id", id, "--session-timeout", "6s", "--provider", "webhook", "--webhook-url", prov.url(),
			"--cps", "50", "--max-in-flight", "100")...)...)
	}
	dial := dialer("dialer", "d1")

	dial.awaitReady(1, 60*time.Second)
	calls := ivrCalls(1000, 3, "welcome")
	want := produceCalls(t, brokers, pfx, parts, calls)
	// Kill at about half: an event the provider reports, not a time.
	awaitKeys := func(n int) {
		for deadline := time.Now().Add(90 * time.Second); prov.distinctKeys() < n; {
			if err := dial.exited(); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d calls placed after 90s", prov.distinctKeys(), len(calls))
			}
			select {
			case <-prov.news:
			case <-time.After(time.Second):
			}
		}
	}
	awaitKeys(len(calls) / 2)
	killedAt := time.Now()
	dial.kill9()
	sentAtKill := prov.distinctKeys()
	committed := committedCalls(t, brokers, pfx)
	dial.restart()
	awaitKeys(len(calls) * 2 / 3)
	joinedAt := time.Now()
	dial2 := dialer("dialer-2", "d2")
	r := prov.waitAll(t, want, time.Now().Add(120*time.Second), dial, dial2)
	r.check(t)

	var times []time.Time
	for _, at := range r.firstPlaced {
		times = append(times, at)
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	var restartedAt time.Time // the first placement after the kill
	for _, at := range times {
		if at.After(killedAt) {
			restartedAt = at
			break
		}
	}
	// Whole seconds inside each run, away from its start and end.
	before, nBefore := rate(times, times[0].Add(2*time.Second), killedAt.Add(-time.Second))
	after, nAfter := rate(times, restartedAt.Add(2*time.Second), joinedAt.Add(-time.Second))
	joined, nJoined := rate(times, joinedAt.Add(5*time.Second), times[len(times)-1].Add(-time.Second))
	t.Logf("dialer pace: %.1f calls/s before the kill (%d calls), %.1f after the restart (%d calls), %.1f with two dialers (%d calls); back %v after the kill; 429 answers %d; %s",
		before, nBefore, after, nAfter, joined, nJoined, restartedAt.Sub(killedAt).Round(time.Millisecond), len(prov.refusedTooMany()), r)
	if tooMany := prov.refusedTooMany(); len(tooMany) != 0 {
		var when []string
		for _, at := range tooMany {
			when = append(when, at.Sub(killedAt).Round(time.Millisecond).String())
		}
		t.Errorf("%d requests over the provider's 50 calls per second, at %v from the kill", len(tooMany), when)
	}
	for name, v := range map[string]float64{"before the kill": before, "after the restart": after} {
		if v < 45 || v > 55 {
			t.Errorf("%.1f calls/s %s, want 50 ± 5", v, name)
		}
	}
	// Each dialer takes the share of its partitions: together they keep to
	// the account's rate, and fall below it when one has less of the
	// backlog left than the other.
	if joined > 55 {
		t.Errorf("%.1f calls/s with two dialers, want at most 55", joined)
	}

	// Every call has a final result; a repeated final (a status replayed
	// after the kill) carries the same outcome.
	results := consumeUntil(t, brokers, string(topology.NewTopics(pfx).Results), 60*time.Second, func(seen map[string][]*pb.CallResult) bool {
		return len(finals(seen)) >= len(calls)
	})
	fin := finals(results)
	repeated := 0
	for id, rs := range fin {
		if len(rs) > 1 {
			repeated++
		}
		if rs[0].GetOutcome() != pb.Outcome_OUTCOME_ANSWERED {
			t.Errorf("call %s: final %v", id, rs[0])
		}
	}
	t.Logf("ivr-results: %d calls with a final result, %d of them published twice", len(fin), repeated)
	if len(fin) != len(calls) {
		t.Errorf("%d calls with a final result, want %d", len(fin), len(calls))
	}
	// Calls in flight are the uncommitted tail of ivr-calls: at the kill,
	// the dialer had committed only calls it had placed, and the restarted
	// dialer consumed the others again.
	t.Logf("at the kill: ivr-calls committed %d of %d calls; the provider had %d call ids; %d sent and not committed (in flight, consumed again)",
		committed, len(calls), sentAtKill, int64(sentAtKill)-committed)
	if committed > int64(sentAtKill) || committed == 0 || committed == int64(len(calls)) {
		t.Errorf("%d calls committed at the kill, %d placed: a call was committed before it was placed, or nothing was in flight", committed, sentAtKill)
	}
	// The second dialer took partitions over.
	b, _ := os.ReadFile(dial2.log)
	if owned := bytes.Count(b, []byte("dialer partition owned")); owned == 0 {
		t.Error("the second dialer owned no partition")
	} else {
		t.Logf("the second dialer took %d partitions over (counted at each session)", owned)
	}
	// Once every call's outcome is recorded, ivr-calls is committed to its
	// end (the commits follow within about a second).
	for deadline := time.Now().Add(30 * time.Second); ; {
		got, end := committedCalls(t, brokers, pfx), endOfCalls(t, brokers, pfx)
		if got == end {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("ivr-calls committed to %d of %d, 30s after every call was placed", got, end)
			break
		}
		time.Sleep(200 * time.Millisecond) // polling the group's offsets: Kafka tells of no commit
	}
}

// endOfCalls is the sum of the end offsets of ivr-calls' partitions.
func endOfCalls(t *testing.T, brokers, pfx string) int64 {
	t.Helper()
	var n int64
	for _, o := range endOffsets(t, brokers, string(topology.NewTopics(pfx).Calls)) {
		n += o
	}
	return n
}

// endOffsets is the end offset of each of topic's partitions, as it is now.
func endOffsets(t *testing.T, brokers, topic string) map[int32]int64 {
	t.Helper()
	c, err := sarama.NewClient(strings.Split(brokers, ","), saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	ends := make(map[int32]int64, len(parts))
	for _, p := range parts {
		if ends[p], err = c.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			t.Fatal(err)
		}
	}
	return ends
}

// committedCalls is how many ivr-calls records the dialer's group has
// committed, over all partitions.
func committedCalls(t *testing.T, brokers, pfx string) int64 {
	t.Helper()
	topics := topology.NewTopics(pfx)
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: strings.Split(brokers, ",")}
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Sarama())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	res, err := admin.ListConsumerGroupOffsets(string(topics.Dialer), nil)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, b := range res.Blocks[string(topics.Calls)] {
		if b.Err != sarama.ErrNoError {
			t.Fatal(b.Err)
		}
		n += max(b.Offset, 0)
	}
	return n
}

// finals groups the final results by call id.
func finals(seen map[string][]*pb.CallResult) map[string][]*pb.CallResult {
	out := map[string][]*pb.CallResult{}
	for id, rs := range seen {
		for _, r := range rs {
			if r.GetFinal() {
				out[id] = append(out[id], r)
			}
		}
	}
	return out
}

// consumeUntil reads ivr-results from the start, grouped by call id, until
// done says so.
func consumeUntil(t *testing.T, brokers, topic string, within time.Duration, done func(map[string][]*pb.CallResult) bool) map[string][]*pb.CallResult {
	t.Helper()
	seen := map[string][]*pb.CallResult{}
	kafkatest.Consume(t, brokers, topic, saramaConfig(), within, func(m *sarama.ConsumerMessage) bool {
		r := &pb.CallResult{}
		if err := proto.Unmarshal(m.Value, r); err != nil {
			t.Fatalf("result at %d/%d: %v", m.Partition, m.Offset, err)
		}
		seen[r.GetCallId()] = append(seen[r.GetCallId()], r)
		return done(seen)
	})
	return seen
}

// The Twilio provider against a local fake of the Calls API, through the
// binary: calls are created with the status callback URL; statuses signed
// with the auth token are recorded and published on ivr-results; one with a
// wrong signature and one stale are refused with 403, counted, and change
// nothing.
func TestTwilioStatusCallbacks(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 4
	const sid, token = "AC00000000000000000000000000000001", "test-auth-token"
	fake := twiliotest.New(twiliotest.Options{AccountSID: sid, AuthToken: token})
	t.Cleanup(fake.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	web := ln.Addr().String()
	ln.Close()
	t.Setenv("TWILIO_ACCOUNT_SID", sid)
	t.Setenv("TWILIO_AUTH_TOKEN", token)
	dial := start(t, "dialer", append([]string{"dialer"}, roleArgs(t, brokers, pfx, parts,
		"--provider", "twilio", "--twilio-api", fake.URL, "--twilio-from", "+14155550199", "--cps", "10",
		"--twilio-script-url", "https://ivr.example/twiml/{script}",
		"--callback-http", web, "--public-url", "http://"+web, "--twilio-amd", "enable")...)...)

	dial.awaitReady(1, 60*time.Second)
	produceCalls(t, brokers, pfx, parts, ivrCalls(2, 1, "hello")) // a script by name (--twilio-script-url)
	placed, err := fake.WaitCalls(2, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := dial.exited(); err != nil {
		t.Fatal(err)
	}
	byUser := map[string]twiliotest.Call{}
	for _, c := range placed {
		cb, err := url.Parse(c.Form.Get("StatusCallback"))
		if err != nil || c.Form.Get("Url") != "https://ivr.example/twiml/hello" || c.Form.Get("From") != "+14155550199" || c.Form.Get("MachineDetection") != "Enable" {
			t.Fatalf("call %v", c.Form)
		}
		byUser[cb.Query().Get("user_id")] = c
	}
	answered, busy := byUser["user-0000"], byUser["user-0001"]
	// The placements' answers first, so that the statuses follow them.
	consumeUntil(t, brokers, string(topology.NewTopics(pfx).Results), 60*time.Second, func(seen map[string][]*pb.CallResult) bool {
		return len(seen) == 2
	})
	send := func(c twiliotest.Call, status string, extra url.Values, sign bool, want int) {
		t.Helper()
		code, err := fake.SendStatus(c, status, extra, sign)
		if err != nil || code != want {
			t.Fatalf("status %s: %d %v, want %d", status, code, err, want)
		}
	}
	send(answered, "ringing", nil, true, http.StatusNoContent)
	send(answered, "in-progress", url.Values{"AnsweredBy": {"human"}}, true, http.StatusNoContent)
	send(answered, "completed", url.Values{"CallDuration": {"42"}}, true, http.StatusNoContent)
	// A forged status, then a stale one: refused.
	send(busy, "no-answer", nil, false, http.StatusForbidden)
	stale := url.Values{"Timestamp": {time.Now().Add(-time.Hour).UTC().Format(time.RFC1123Z)}}
	send(busy, "failed", stale, true, http.StatusForbidden)
	send(busy, "busy", nil, true, http.StatusNoContent)

	results := consumeUntil(t, brokers, string(topology.NewTopics(pfx).Results), 60*time.Second, func(seen map[string][]*pb.CallResult) bool {
		return len(finals(seen)) == 2
	})
	outcomes := func(user string) []string {
		var out []string
		for _, r := range results[user+"/task-0/1"] {
			out = append(out, strings.TrimPrefix(r.GetOutcome().String(), "OUTCOME_")+map[bool]string{true: "(final)"}[r.GetFinal()])
			if r.GetProviderCallId() != byUser[user].SID {
				t.Errorf("result %v: provider call id, want %s", r, byUser[user].SID)
			}
		}
		return out
	}
	if got, want := outcomes("user-0000"), []string{"PLACED", "RINGING", "ANSWERED", "ANSWERED(final)"}; !slices.Equal(got, want) {
		t.Errorf("user-0000: %v, want %v", got, want)
	}
	if got, want := outcomes("user-0001"), []string{"PLACED", "BUSY(final)"}; !slices.Equal(got, want) {
		t.Errorf("user-0001: %v, want %v (the forged and the stale callbacks refused)", got, want)
	}
	b, _ := os.ReadFile(dial.log)
	if !bytes.Contains(b, []byte("refused_total=2")) {
		t.Errorf("the dialer's log does not count 2 refused callbacks")
	}
}
