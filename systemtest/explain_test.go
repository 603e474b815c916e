package systemtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/explain"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
	"github.com/ivrsched/ivrsched/internal/providers/webhook"
	"github.com/ivrsched/ivrsched/topology"
)

// `ivrsched explain` on Apache Kafka, through the binary: a user in Berlin
// asks for two follow-ups at a minute the calling policy keeps closed.
// Both move to the next minute's opening (the window); the cap (one call
// per 15 s) moves the second 15 s further. The provider places each call
// and reports its outcome later through a signed status callback: the
// second's first attempt is not answered, the retry rules call again 3 s
// later, the cap moves that retry once more, and it is answered. explain
// prints the second follow-up's story in order, each move with its rule
// and times in UTC and in Berlin: requested, window, cap, fired (call id,
// lateness), placed (provider call id), no answer, retry, cap, fired,
// placed, answered, outcome. The admin API's /api/explain answers the same
// as JSON, and the web page's user view shows it; no output holds the
// phone number.
func TestExplainDeferredCappedRetriedAnswered(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 4
	const (
		user   = "explain-user"
		phone  = "+4915112345678"
		secret = "systemtest-webhook-secret-0123456789"
	)
	t.Setenv("IVRSCHED_WEBHOOK_SECRET", secret)
	ber, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}

	// The provider: every call placed (a provider call id, statuses to
	// follow); the test reports each outcome once the placement is on
	// ivr-results.
	type placed struct {
		call     *pb.IVRCall
		callback string
	}
	var mu sync.Mutex
	calls := map[string]placed{}
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c := &pb.IVRCall{}
		if err := protojson.Unmarshal(body, c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		calls[c.GetCallId()] = placed{c, r.Header.Get(webhook.CallbackHeader)}
		mu.Unlock()
		fmt.Fprintf(w, `{"provider_call_id":"CA-%s"}`, c.GetCallId())
	}))
	t.Cleanup(prov.Close)

	web, cb := freeAddr(t), freeAddr(t)
	ivr := start(t, "run", append([]string{"run", "--http", web, "--callback-http", cb, "--public-url", "http://" + cb},
		roleArgs(t, brokers, pfx, parts, "--provider", "webhook", "--webhook-url", prov.URL+"/calls")...)...)
	waitLog(t, ivr, "calling policy in force", 60*time.Second)

	// The policy: open all day but one minute (Berlin's minutes are UTC's),
	// a cap of one call per 15 s, a no-answer called again after 3 s.
	closed := time.Now().Add(30 * time.Second).Truncate(time.Minute)
	opening := closed.Add(time.Minute)
	lc, lo := closed.In(ber), opening.In(ber)
	var doc strings.Builder
	doc.WriteString("default:\n  open_hours:\n")
	if lc.Hour() != 0 || lc.Minute() != 0 {
		fmt.Fprintf(&doc, "    - {days: [mon, tue, wed, thu, fri, sat, sun], from: \"00:00\", to: \"%s\"}\n", lc.Format("15:04"))
	}
	if lo.Hour() != 0 || lo.Minute() != 0 {
		fmt.Fprintf(&doc, "    - {days: [mon, tue, wed, thu, fri, sat, sun], from: \"%s\", to: \"24:00\"}\n", lo.Format("15:04"))
	}
	doc.WriteString("  cap: {calls: 1, per: 15s}\n  retry:\n    max_attempts: 3\n    max_age: 1h\n    no-answer: {delay: 3s, jitter: 0}\n")
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(doc.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "policy", "set", "-f", file, "--brokers", brokers, "--topic-prefix", pfx).CombinedOutput()
	if err != nil {
		t.Fatalf("policy set: %v\n%s", err, out)
	}
	version := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "# policy set, version"))
	waitLog(t, ivr, "version="+version, 30*time.Second)

	// Both follow-ups asked for inside the closed minute.
	requested := closed.Add(2 * time.Second)
	if now := time.Now(); now.After(requested) {
		requested = now.Add(2 * time.Second)
	}
	if !requested.Before(opening.Add(-5 * time.Second)) {
		t.Fatalf("the policy took until %v to be in force: the closed minute %v is over", time.Now(), closed)
	}
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: strings.Split(brokers, ","), Partitions: parts, Replication: 1, FlushFrequency: 5 * time.Millisecond}
	emitAll(t, k, topology.NewTopics(pfx).Onboarding, new(codec.Command), []keyed{{user, &pb.Command{UserId: user, RequestedAt: timestamppb.Now(),
		Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: phone, TimeZone: "Europe/Berlin", FollowUps: []*pb.FollowUp{
			{TaskId: "first", When: &pb.FollowUp_DueAt{DueAt: timestamppb.New(requested)}},
			{TaskId: "second", When: &pb.FollowUp_DueAt{DueAt: timestamppb.New(requested)}},
		}}}}}})

	// Each placement on ivr-results gets its outcome by a signed callback:
	// no answer for the second's first attempt, answered for the rest.
	topics := topology.NewTopics(pfx)
	reported := map[string]bool{}
	var secondCalls []string
	kafkatest.Consume(t, brokers, string(topics.Results), saramaConfig(), 3*time.Minute, func(m *sarama.ConsumerMessage) bool {
		var r pb.CallResult
		if proto.Unmarshal(m.Value, &r) != nil || r.GetUserId() != user {
			return false
		}
		if r.GetFinal() {
			return r.GetTaskId() == "second" && r.GetAttempt() == 2 && reported["first"]
		}
		if r.GetOutcome() != pb.Outcome_OUTCOME_PLACED || reported[r.GetCallId()] {
			return false
		}
		mu.Lock()
		pl := calls[r.GetCallId()]
		mu.Unlock()
		outcome := "answered"
		if r.GetTaskId() == "second" {
			secondCalls = append(secondCalls, r.GetCallId())
			if r.GetAttempt() == 1 {
				outcome = "no_answer"
			}
		}
		body, _ := json.Marshal(map[string]any{"call_id": r.GetCallId(), "user_id": user, "outcome": outcome, "final": true,
			"provider_call_id": "CA-" + r.GetCallId(), "detail": "rang at " + phone})
		req, _ := http.NewRequest(http.MethodPost, pl.callback, bytes.NewReader(body))
		req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(secret), time.Now(), body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("status callback to %q: %v", pl.callback, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status callback: %s", resp.Status)
		}
		reported[r.GetCallId()], reported[r.GetTaskId()] = true, true
		return false
	})
	kafkatest.Consume(t, brokers, string(topics.Events), saramaConfig(), time.Minute, func(m *sarama.ConsumerMessage) bool {
		var e pb.ScheduleEvent
		return proto.Unmarshal(m.Value, &e) == nil && e.GetUserId() == user && e.GetTaskId() == "second" && e.GetKind() == pb.ScheduleEvent_KIND_ANSWERED
	})
	if len(secondCalls) != 2 || secondCalls[0] == secondCalls[1] {
		t.Fatalf("the second follow-up's calls: %v", secondCalls)
	}
	c1, c2 := secondCalls[0], secondCalls[1]

	// The CLI, as an operator runs it.
	cmd := exec.Command(binary, "explain", "--user", user, "--brokers", brokers, "--topic-prefix", pfx)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	text, err := cmd.Output()
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, stderr.String())
	}
	section := string(text)
	if i := strings.Index(section, "\nFollow-up second: answered\n"); i < 0 {
		t.Fatalf("no answered follow-up second in:\n%s", text)
	} else {
		section = section[i+1:]
	}
	if i := strings.Index(section, "\n\n"); i >= 0 {
		section = section[:i]
	}
	utc := func(t time.Time) string { return t.UTC().Format(explain.UTCLayout) }
	want := []string{
		"requested for " + utc(requested),
		"moved by window: " + utc(requested) + " (" + requested.In(ber).Format("2006-01-02 15:04:05 MST") + ") -> " + utc(opening),
		"moved by cap: " + utc(opening),
		"-> " + utc(opening.Add(15*time.Second)),
		"fired call " + c1 + " (attempt 1), effective " + utc(opening.Add(15*time.Second)),
		"placed call " + c1 + ", provider call CA-" + c1,
		"final no-answer of call " + c1,
		"retry after no-answer: next attempt requested for",
		"moved by cap: ",
		"fired call " + c2 + " (attempt 2)",
		"placed call " + c2 + ", provider call CA-" + c2,
		"final answered of call " + c2,
		"outcome answered, call " + c2,
	}
	at := 0
	for _, w := range want {
		i := strings.Index(section[at:], w)
		if i < 0 {
			t.Fatalf("explain's follow-up second lacks %q after offset %d, in order:\n%s\n(whole output:\n%s)", w, at, section, text)
		}
		at += i + len(w)
	}
	stepLine := regexp.MustCompile(`^  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d CES?T +\S`)
	for _, l := range strings.Split(section, "\n")[1:] {
		if l != "" && !stepLine.MatchString(l) {
			t.Errorf("a step without its UTC and Berlin times: %q", l)
		}
	}
	if !strings.Contains(string(text), "Local times in Europe/Berlin (the user's time zone)") || !strings.Contains(string(text), "Read the user's partition of each topic from") {
		t.Errorf("explain's header:\n%s", text)
	}
	if strings.Contains(string(text), "15112345678") {
		t.Errorf("explain prints the phone number:\n%s", text)
	}

	// The admin API: the same trail as JSON.
	resp, err := http.Get("http://" + web + "/api/explain?" + url.Values{"user": {user}, "task": {"second"}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var tr explain.Trail
	if err := json.Unmarshal(raw, &tr); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/api/explain: %s: %v\n%s", resp.Status, err, raw)
	}
	var got []string
	if len(tr.FollowUps) == 1 {
		for _, s := range tr.FollowUps[0].Steps {
			got = append(got, strings.TrimSuffix(s.What+"/"+s.Rule, "/"))
		}
	}
	if g, w := strings.Join(got, " "), "requested moved/window moved/cap fired placed final retry moved/cap fired placed final answered"; g != w {
		t.Errorf("/api/explain?task=second: steps\n got %s\nwant %s", g, w)
	}
	if bytes.Contains(raw, []byte("15112345678")) {
		t.Errorf("/api/explain holds the phone number")
	}

	// The web page's user view.
	resp, err = http.Get("http://" + web + "/ui/?user=" + user)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(page, []byte("Decision trail")) || !bytes.Contains(page, []byte("moved by cap")) || !bytes.Contains(page, []byte("final no-answer of call "+c1)) {
		t.Errorf("the web page's user view lacks the trail:\n%s", page)
	}
	if bytes.Contains(page, []byte("15112345678")) {
		t.Errorf("the web page shows the phone number")
	}
	t.Logf("explain, follow-up second:\n%s", section)
}
