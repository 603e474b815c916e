package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/topology"
)

// A policy file with problems is refused before anything is produced: exit
// 2, one line per problem naming the field and its line.
func TestPolicySetRejectsAnInvalidFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("default:\n  open_hours: [{days: [mon-fri], from: \"9:00\", to: \"17:00\"}]\n  colour: blue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"policy"}, []string{"want a subcommand"}},
		{[]string{"policy", "get"}, []string{`unknown subcommand "get"`}},
		{[]string{"policy", "set"}, []string{"-f: required"}},
		{[]string{"policy", "set", "-f", filepath.Join(t.TempDir(), "missing.yaml")}, []string{"-f:", "no such file"}},
		{[]string{"policy", "set", "-f", bad, "--brokers", "127.0.0.1:1"}, []string{
			"3 problems", `default.open_hours[0].days[0] (line 2): "mon-fri" is not a day`,
			`default.open_hours[0].from (line 2): "9:00" is not a time`, "default.colour (line 3): unknown field"}},
	}
	for _, c := range cases {
		var errb bytes.Buffer
		code := realMain(context.Background(), c.args, io.Discard, &errb)
		for _, w := range c.want {
			if code != 2 || !strings.Contains(errb.String(), w) {
				t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), w)
			}
		}
	}
}

// The issue's demonstration: `ivrsched policy set` on a running `ivrsched
// run`, then `ivrsched onboard` for a user whose local time is outside the
// window: the query page shows the requested and the deferred effective
// time, followup-events reports the deferral, and `policy show` prints the
// policy back.
func TestPolicySetOnARunningScheduler(t *testing.T) {
	broker, web := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- realMain(ctx, []string{"run", "--embedded-addr", broker, "--http", web, "--data-dir", t.TempDir(), "--log-level", "warn", "--default-policy", "none"}, &runOut, io.Discard)
	}()
	for !strings.Contains(runOut.String(), "web UI on") {
		select {
		case code := <-done:
			t.Fatalf("run exited %d: %s", code, runOut.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	get := func(path string) string {
		resp, err := http.Get("http://" + web + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return html.UnescapeString(string(b))
	}
	if page := get("/policy"); !strings.Contains(page, "no calling policy") {
		t.Fatalf("/policy before any is set:\n%s", page)
	}

	// A one-hour window six hours away from the user's local time now.
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	h := (time.Now().In(tokyo).Hour() + 6) % 24
	doc := fmt.Sprintf("default:\n  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: \"%02d:00\", to: \"%02d:00\"}]\n  spread: 10m\n", h, h+1)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := realMain(ctx, []string{"policy", "set", "-f", file, "--brokers", broker}, &out, io.Discard); code != 0 {
		t.Fatalf("policy set exited %d: %s", code, out.String())
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	version := strings.TrimPrefix(first, "# policy set, version ")
	if len(version) != 16 {
		t.Fatalf("policy set printed %q", out.String())
	}
	// The running scheduler applies it once its view has read it.
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(get("/policy"), version); {
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler does not apply version %s:\n%s", version, get("/policy"))
		}
		select {
		case code := <-done:
			t.Fatalf("run exited %d", code)
		case <-time.After(20 * time.Millisecond): // the page has no event to await
		}
	}
	var shown bytes.Buffer
	if code := realMain(ctx, []string{"policy", "show", "--brokers", broker}, &shown, io.Discard); code != 0 || !strings.Contains(shown.String(), "# policy in force, version "+version) {
		t.Fatalf("policy show exited %d: %s", code, shown.String())
	}

	if code := realMain(ctx, []string{"onboard", "--user", "night", "--phone", "+81312345678", "--tz", "Asia/Tokyo", "--delay", "1m", "--task", "welcome", "--brokers", broker}, io.Discard, io.Discard); code != 0 {
		t.Fatalf("onboard exited %d", code)
	}
	var st struct {
		Pending []struct {
			TaskID        string    `json:"task_id"`
			DueAt         time.Time `json:"due_at"`
			RequestedAt   time.Time `json:"requested_at"`
			Deferred      string    `json:"deferred"`
			PolicyVersion string    `json:"policy_version"`
		} `json:"pending"`
	}
	for deadline := time.Now().Add(20 * time.Second); len(st.Pending) == 0; {
		page := get("/query/ivr-scheduler-table/night")
		if i, j := strings.Index(page, "<pre>"), strings.Index(page, "</pre>"); i >= 0 && j > i {
			_ = json.Unmarshal([]byte(page[i+5:j]), &st)
		}
		if len(st.Pending) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no pending follow-up on the query page:\n%s", page)
			}
			time.Sleep(20 * time.Millisecond) // the page has no event to await
		}
	}
	p := st.Pending[0]
	local := p.DueAt.In(tokyo)
	if p.Deferred != "window" || p.PolicyVersion != version || local.Hour() != h || local.Minute() >= 10 || !p.DueAt.After(p.RequestedAt) {
		t.Fatalf("query page shows %+v (effective %v local), want deferred to %02d:00 plus the spread", p, local, h)
	}

	c, err := sarama.NewConsumer([]string{broker}, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := string(topology.NewTopics("").Events)
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var ev *pb.ScheduleEvent
	for _, part := range parts {
		pc, err := c.ConsumePartition(topic, part, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		hwm := pc.HighWaterMarkOffset()
		for hwm > 0 {
			m := <-pc.Messages()
			var e pb.ScheduleEvent
			if proto.Unmarshal(m.Value, &e) == nil && e.GetUserId() == "night" && e.GetKind() == pb.ScheduleEvent_KIND_DEFERRED {
				ev = &e
			}
			if m.Offset >= hwm-1 {
				break
			}
		}
		pc.Close()
	}
	if ev == nil || ev.GetReason() != "window" || !ev.GetDueAt().AsTime().Equal(p.DueAt) || !ev.GetRequestedAt().AsTime().Equal(p.RequestedAt) {
		t.Fatalf("followup-events: %v", ev)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("run exited %d", code)
	}
}
