package systemtest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// windowZones are 20 zones, with offsets of whole hours, half hours
// (Kolkata, Adelaide) and three quarters (Kathmandu, Chatham), both
// hemispheres.
var windowZones = []string{
	"America/Los_Angeles", "America/Denver", "America/Chicago", "America/New_York", "America/Sao_Paulo",
	"Atlantic/Azores", "Europe/London", "Europe/Berlin", "Europe/Athens", "Europe/Moscow",
	"Asia/Dubai", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Bangkok", "Asia/Shanghai",
	"Asia/Tokyo", "Australia/Adelaide", "Australia/Sydney", "Pacific/Auckland", "Pacific/Chatham",
}

// evenMinutes is a policy open during every even minute of the recipient's
// local time (720 windows a day, a day compressed into two minutes), with
// a 30 s spread: a follow-up due in an odd minute waits for the next even
// one.
func evenMinutes() string {
	var b strings.Builder
	b.WriteString("default:\n  spread: 30s\n  open_hours:\n")
	for h := 0; h < 24; h++ {
		for m := 0; m < 60; m += 2 {
			fmt.Fprintf(&b, "    - {days: [mon, tue, wed, thu, fri, sat, sun], from: \"%02d:%02d\", to: \"%02d:%02d\"}\n", h, m, h, m+1)
		}
	}
	return b.String()
}

// The calling policy on Apache Kafka: `ivrsched policy set` on a running
// `ivrsched run`, then 1,000 users in 20 time zones with follow-ups due
// over 70 s, under a policy open every even minute of local time. Every
// follow-up is placed once, inside its user's window (by the provider's
// clock: the minute it received the call is even in the user's zone),
// never before it was requested; those requested in a closed minute were
// deferred, and each deferral was reported on followup-events.
func TestCallingWindows(t *testing.T) {
	brokers := needKafka(t)
	pfx, parts := prefix(t), 6
	prov := newProvider(t)
	ivr := start(t, "run", append([]string{"run", "--http", ""}, roleArgs(t, brokers, pfx, parts, "--provider", "webhook", "--webhook-url", prov.url())...)...)
	waitLog(t, ivr, "calling policy in force", 60*time.Second)

	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(evenMinutes()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "policy", "set", "-f", file, "--brokers", brokers, "--topic-prefix", pfx).CombinedOutput()
	if err != nil {
		t.Fatalf("policy set: %v\n%s", err, out)
	}
	version := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "# policy set, version"))
	waitLog(t, ivr, "version="+version, 30*time.Second) // the scheduler's view has it
	if show, err := exec.Command(binary, "policy", "show", "--brokers", brokers, "--topic-prefix", pfx).CombinedOutput(); err != nil || !strings.Contains(string(show), version) {
		t.Fatalf("policy show: %v\n%s", err, show)
	}

	// Requested times over 70 s, at seconds 5 to 55 of a minute: in an odd
	// local minute a follow-up waits for the next even one.
	type user struct {
		zone      *time.Location
		requested time.Time
	}
	users := map[string]user{}
	rng := rand.New(rand.NewPCG(12, 1))
	from := time.Now().Add(10 * time.Second)
	deferred := 0
	k := kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: strings.Split(brokers, ","), Partitions: parts, Replication: 1, FlushFrequency: 5 * time.Millisecond}
	em, err := goka.NewEmitter(k.Brokers, topology.NewTopics(pfx).Onboarding, new(codec.Command), k.EmitterOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	now := timestamppb.Now()
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("user-%04d", i)
		loc, err := time.LoadLocation(windowZones[i%len(windowZones)])
		if err != nil {
			t.Fatal(err)
		}
		req := from.Add(time.Duration(rng.Int64N(int64(70 * time.Second))))
		if s := req.Second(); s < 5 || s >= 55 { // 5 s from the minute's edges: lateness cannot cross them
			req = req.Add(10 * time.Second)
		}
		users[id] = user{loc, req}
		if req.In(loc).Minute()%2 == 1 {
			deferred++
		}
		cmd := &pb.Command{UserId: id, RequestedAt: now, Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
			Phone: "+4915112345678", TimeZone: loc.String(),
			FollowUps: []*pb.FollowUp{{TaskId: "call", When: &pb.FollowUp_DueAt{DueAt: timestamppb.New(req)}}},
		}}}
		if _, err := em.Emit(id, cmd); err != nil {
			t.Fatal(err)
		}
	}
	if err := em.Finish(); err != nil {
		t.Fatal(err)
	}
	if deferred < 100 || deferred > 900 {
		t.Fatalf("%d of 1000 in a closed minute: the plan does not test deferral", deferred)
	}

	deadline := time.Now().Add(5 * time.Minute)
	for {
		placed := map[string]request{}
		prov.mu.Lock()
		for _, q := range prov.reqs {
			if _, ok := placed[q.call.GetUserId()]; !ok {
				placed[q.call.GetUserId()] = q
			}
		}
		prov.mu.Unlock()
		if len(placed) == len(users) {
			break
		}
		if err := ivr.exited(); err != nil || time.Now().After(deadline) {
			t.Fatalf("placed %d of %d (%v)", len(placed), len(users), err)
		}
		select {
		case <-prov.news:
		case <-time.After(time.Second):
		}
	}

	prov.mu.Lock()
	reqs := append([]request(nil), prov.reqs...)
	prov.mu.Unlock()
	seen := map[string]string{}
	outside, early, moved := 0, 0, 0
	var lateness []time.Duration
	for _, q := range reqs {
		u := users[q.call.GetUserId()]
		if id, ok := seen[q.call.GetUserId()]; ok {
			if id != q.call.GetCallId() {
				t.Errorf("%s placed under two call ids", q.call.GetUserId())
			}
			continue
		}
		seen[q.call.GetUserId()] = q.call.GetCallId()
		due := q.call.GetDueAt().AsTime()
		switch {
		case q.at.In(u.zone).Minute()%2 == 1 || due.In(u.zone).Minute()%2 == 1:
			outside++
			t.Errorf("%s (%s) requested %s, effective %s, placed %s: outside the window", q.call.GetUserId(), u.zone,
				u.requested.In(u.zone).Format("15:04:05.000"), due.In(u.zone).Format("15:04:05.000"), q.at.In(u.zone).Format("15:04:05.000"))
		case q.at.Before(due) || due.Before(u.requested):
			early++
			t.Errorf("%s requested %s, effective %s, placed %s: early", q.call.GetUserId(), u.requested, due, q.at)
		}
		if !due.Equal(u.requested) {
			moved++
		}
		lateness = append(lateness, q.at.Sub(due))
	}
	if moved != deferred {
		t.Errorf("%d follow-ups moved, %d were requested in a closed minute", moved, deferred)
	}
	events := consumeAll(t, brokers, string(topology.NewTopics(pfx).Events), deferred, 30*time.Second)
	reported := 0
	for _, m := range events {
		var e pb.ScheduleEvent
		if proto.Unmarshal(m.Value, &e) == nil && e.GetKind() == pb.ScheduleEvent_KIND_DEFERRED && e.GetReason() == "window" {
			reported++
		}
	}
	if reported != deferred {
		t.Errorf("%d deferrals reported on followup-events, want %d", reported, deferred)
	}
	slices.Sort(lateness)
	t.Logf("1000 users in %d zones: %d deferred to their next window, placed outside a window %d, early %d; lateness after the effective time p50 %v p99 %v max %v",
		len(windowZones), deferred, outside, early, lateness[len(lateness)/2], lateness[len(lateness)*99/100], lateness[len(lateness)-1])
}

// waitLog waits until the process's log has a line containing s.
func waitLog(t *testing.T, p *proc, s string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		b, _ := os.ReadFile(p.log)
		if strings.Contains(string(b), s) {
			return
		}
		if err := p.exited(); err != nil || time.Now().After(deadline) {
			t.Fatalf("no %q in the log of %s within %v (%v)", s, p.name, within, err)
		}
		time.Sleep(50 * time.Millisecond) // a log file has no event to await
	}
}
