package systemtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/providers/twilio"
	"github.com/ivrsched/ivrsched/internal/providers/twilio/twiliotest"
	"github.com/ivrsched/ivrsched/topology"
)

// An opt-out by keypress on Apache Kafka through the binary, with the
// Twilio fake: alice's follow-up is called; her script's Gather result
// with the opt-out digit, signed as Twilio signs it, ends her call as
// OUTCOME_OPTED_OUT and lists the number the call was placed to. A later
// follow-up of another user, bob, with the same number is then reported
// KIND_SUPPRESSED with the opt-out's reason and not dialled, while carol,
// with another number, is called. A forged Gather result is refused and
// another key lists nothing. The admin API lists the entry by key, without
// the number, and only with the admin token; `suppress check` finds it.
func TestOptOutByKeypress(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 4
	const sid, token, adminToken = "AC00000000000000000000000000000002", "test-auth-token", "systemtest-admin-token"
	const shared, other = "+14155550111", "+14155550112"
	fake := twiliotest.New(twiliotest.Options{AccountSID: sid, AuthToken: token})
	t.Cleanup(fake.Close)
	web, adm := freeAddr(t), freeAddr(t)
	t.Setenv("TWILIO_ACCOUNT_SID", sid)
	t.Setenv("TWILIO_AUTH_TOKEN", token)
	t.Setenv("IVRSCHED_ADMIN_TOKEN", adminToken)
	ivr := start(t, "run", append([]string{"run", "--http", "", "--admin-http", adm}, roleArgs(t, brokers, pfx, parts,
		"--provider", "twilio", "--twilio-api", fake.URL, "--twilio-from", "+14155550199", "--cps", "10",
		"--twilio-script-url", "https://ivr.example/twiml/{script}?call_id={call_id}&user_id={user_id}",
		"--callback-http", web, "--public-url", "http://"+web, "--opt-out-digit", "9")...)...)
	ivr.awaitReady(1, 90*time.Second)
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: strings.Split(brokers, ","), Partitions: parts, Replication: 1, FlushFrequency: 5 * time.Millisecond}
	topics := topology.NewTopics(pfx)
	onboard := func(user, number string, due time.Time) {
		t.Helper()
		ob := &pb.Onboard{Phone: number, TimeZone: "America/Chicago", FollowUps: []*pb.FollowUp{
			{TaskId: "f1", When: &pb.FollowUp_DueAt{DueAt: timestamppb.New(due)}, Action: &pb.Action{IvrScript: "offer"}}}}
		emitAll(t, k, topics.Onboarding, new(codec.Command), []keyed{{user, &pb.Command{UserId: user, RequestedAt: timestamppb.Now(), Command: &pb.Command_Onboard{Onboard: ob}}}})
	}

	onboard("alice", shared, time.Now().Add(time.Second))
	calls, err := fake.WaitCalls(1, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := calls[0]
	script, err := url.Parse(c.Form.Get("Url"))
	if err != nil || c.Form.Get("To") != shared || script.Query().Get("user_id") != "alice" || script.Query().Get("call_id") == "" {
		t.Fatalf("alice's call %v", c.Form)
	}
	callID := script.Query().Get("call_id")
	// The placement's answer first, as on a real call; then it is answered.
	consumeUntil(t, brokers, string(topics.Results), 60*time.Second, func(seen map[string][]*pb.CallResult) bool { return len(seen[callID]) > 0 })
	if code, err := fake.SendStatus(c, "in-progress", nil, true); err != nil || code != http.StatusNoContent {
		t.Fatalf("in-progress: %d %v", code, err)
	}
	// The script's Gather names the call as its TwiML URL received it.
	action := "http://" + web + twilio.GatherPath + "?" + url.Values{"call_id": {callID}, "user_id": {"alice"}}.Encode()
	gather := func(digits string, sign bool, want int) string {
		t.Helper()
		code, body, err := fake.SendGather(c, action, digits, sign)
		if err != nil || code != want {
			t.Fatalf("gather %q: %d %v %s, want %d", digits, code, err, body, want)
		}
		return body
	}
	gather("9", false, http.StatusForbidden)
	if body := gather("1", true, http.StatusOK); strings.Contains(body, "Hangup") {
		t.Fatalf("another key ends the call with: %s", body)
	}
	if body := gather("9", true, http.StatusOK); !strings.Contains(body, "<Hangup/>") {
		t.Fatalf("the opt-out is answered with: %s", body)
	}

	// Later follow-ups: bob has alice's number, carol another.
	due := time.Now().Add(3 * time.Second)
	onboard("bob", shared, due)
	onboard("carol", other, due)
	var reported *pb.ScheduleEvent
	for end := time.Now().Add(60 * time.Second); reported == nil; {
		for _, m := range readToEnd(t, brokers, string(topics.Events)) {
			var e pb.ScheduleEvent
			if proto.Unmarshal(m.Value, &e) == nil && e.GetKind() == pb.ScheduleEvent_KIND_SUPPRESSED {
				if e.GetUserId() != "bob" {
					t.Fatalf("suppressed %v", &e)
				}
				reported = &e
			}
		}
		if err := ivr.exited(); err != nil || (reported == nil && time.Now().After(end)) {
			t.Fatalf("bob's follow-up not reported suppressed (%v)", err)
		}
		if reported == nil {
			time.Sleep(200 * time.Millisecond) // followup-events is polled: the report comes from a tick
		}
	}
	if !strings.HasPrefix(reported.GetReason(), "opted out by keypress") || !strings.Contains(reported.GetReason(), callID) {
		t.Errorf("bob's report %v, want the opt-out's reason with alice's call id", reported)
	}
	if _, err := fake.WaitCalls(2, 60*time.Second); err != nil { // carol's
		t.Fatal(err)
	}
	// Bob's report comes after the decision not to place his call
	// (the scheduler's at the fire, or the dialer's OUTCOME_SUPPRESSED).
	var toShared, toOther int
	for _, c := range fake.Calls() {
		switch c.Form.Get("To") {
		case shared:
			toShared++
		case other:
			toOther++
		}
	}
	if toShared != 1 || toOther != 1 {
		t.Fatalf("calls to the opted-out number %d (want alice's only), to carol's %d", toShared, toOther)
	}
	results := consumeUntil(t, brokers, string(topics.Results), 60*time.Second, func(seen map[string][]*pb.CallResult) bool {
		return len(finals(seen)[callID]) > 0
	})
	if f := finals(results)[callID]; len(f) != 1 || f[0].GetOutcome() != pb.Outcome_OUTCOME_OPTED_OUT {
		t.Errorf("alice's final results %v, want one OUTCOME_OPTED_OUT", f)
	}

	// The admin API: only with the token, by key, no number.
	get := func(tok string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+adm+admin.SuppressionsPath, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("the list without the token: %d", code)
	}
	code, body := get(adminToken)
	var l admin.SuppressionList
	if err := json.Unmarshal([]byte(body), &l); code != http.StatusOK || err != nil || l.Total != 1 || l.Entries[0].Source != "opt_out" || !l.Entries[0].Active {
		t.Errorf("the list: %d %s", code, body)
	}
	if strings.Contains(body, "5550111") {
		t.Errorf("the list shows the number: %s", body)
	}
	out, err := exec.Command(binary, "suppress", "check", "--number", shared, "--brokers", brokers, "--topic-prefix", pfx, "--partitions", fmt.Sprint(parts)).CombinedOutput()
	if err != nil || strings.Contains(string(out), "not suppressed") || !strings.Contains(string(out), "opted out by keypress") || strings.Contains(string(out), "5550111") {
		t.Errorf("suppress check: %v %s", err, out)
	}
	t.Logf("alice's opt-out (call %s) listed her number; bob's follow-up with it reported %s (%q), not dialled; carol called", callID, reported.GetKind(), reported.GetReason())
}
