package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/deadletter"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/topology"
)

// After a run on the embedded broker, /metrics says what happened: soon
// users' follow-ups fired (counter, lateness histogram, dialer outcomes,
// provider requests, waits for a calls-per-second token), later users'
// follow-ups pending until rescheduled, cancelled or forgotten (the pending
// gauge goes to 0), invalid phones dead-lettered by reason.
func TestMetricsAfterRun(t *testing.T) {
	const (
		soon    = 40 // follow-ups due in a second: they fire
		later   = 12 // follow-ups due in an hour: pending until the end
		badOnes = 7  // onboardings with an invalid phone
		resched = 3  // later follow-ups rescheduled, then cancelled
		forget  = 2  // later users forgotten; the others cancelled
	)
	b, err := StartEmbedded("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	web := freeAddr(t)

	prov := &placed{n: make(chan struct{}, 2*soon)}
	cfg := Config{
		SuppressionKey: testSuppressionKey,
		Kafka:          kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: []string{b.Addr()}, Partitions: 4, Replication: 1, FlushFrequency: time.Millisecond},
		Topics:         topology.NewTopics("metrics-"),
		DataDir:        t.TempDir(),
		HTTP:           web,
		Provider:       prov,
		CPS:            1000, // the whole deployment's: this process owns every partition
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:        prometheus.NewPedanticRegistry(), // checks every metric against its description
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run, done := runReady(ctx, t, cfg)
	m := scrape(t, web)
	m.expect(t, "ivrsched_restore_partitions", map[string]string{"role": "scheduler"}, 0)
	m.expect(t, "ivrsched_followups_pending", nil, 0)

	em, err := goka.NewEmitter(cfg.Kafka.Brokers, cfg.Topics.Onboarding, new(codec.Command), cfg.Kafka.EmitterOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer em.Finish()
	now := timestamppb.Now()
	send := func(user string, c *pb.Command) {
		t.Helper()
		c.UserId, c.RequestedAt = user, now
		if _, err := em.Emit(user, c); err != nil {
			t.Fatal(err)
		}
	}
	onboard := func(user, phone string, d time.Duration) {
		send(user, &pb.Command{Command: &pb.Command_Onboard{Onboard: &pb.Onboard{Phone: phone, TimeZone: "America/New_York",
			FollowUps: []*pb.FollowUp{{TaskId: "call", When: &pb.FollowUp_Delay{Delay: durationpb.New(d)}}}}}})
	}
	for i := range soon {
		onboard(fmt.Sprint("soon-", i), "+14155550100", time.Second)
	}
	for i := range later {
		onboard(fmt.Sprint("later-", i), "+14155550100", time.Hour)
	}
	for i := range badOnes {
		onboard(fmt.Sprint("bad-", i), "+1415555", time.Second)
	}
	commands := int64(soon + later + badOnes)
	for i := range soon {
		select {
		case <-prov.n:
		case <-time.After(60 * time.Second):
			t.Fatalf("%d of %d calls placed after 60s", i, soon)
		case err := <-done:
			t.Fatalf("run ended: %v", err)
		}
	}
	await(t, done, "the commands processed and the calls' final results recorded", func() bool {
		return run.Scheduler.Stats.Commands.Load() == commands && run.Dialer.Stats.Finals.Load() == soon
	})

	m = scrape(t, web)
	m.expect(t, "ivrsched_followups_scheduled_total", nil, soon+later)
	m.expect(t, "ivrsched_followups_fired_total", nil, soon)
	m.expectHistogramCount(t, "ivrsched_fire_lateness_seconds", soon)
	m.expect(t, "ivrsched_followups_pending", nil, later)
	m.expect(t, "ivrsched_followups_due", nil, 0)
	m.expect(t, "ivrsched_followups_oldest_due_age_seconds", nil, 0)
	if n := m.series("ivrsched_followups_pending"); n != 4 {
		t.Errorf("ivrsched_followups_pending has %d series, want one per partition (4)", n)
	}
	m.expect(t, "ivrsched_dead_letters_total", map[string]string{"role": "scheduler", "reason": string(deadletter.ReasonInvalidPhone)}, badOnes)
	m.expect(t, "ivrsched_dead_letters_total", map[string]string{"role": "scheduler"}, badOnes) // no other reason
	m.expect(t, "ivrsched_dead_letters_total", map[string]string{"role": "dialer"}, 0)
	if n := m.series("ivrsched_dead_letters_total"); n != 2*len(deadletter.Reasons()) {
		t.Errorf("ivrsched_dead_letters_total has %d series, want every reason of both roles (%d)", n, 2*len(deadletter.Reasons()))
	}
	m.expect(t, "ivrsched_dialer_calls_total", nil, soon)
	m.expect(t, "ivrsched_dialer_calls_forgotten_total", nil, 0)
	m.expect(t, "ivrsched_dialer_outcomes_total", map[string]string{"outcome": "placed"}, soon)
	m.expect(t, "ivrsched_dialer_outcomes_total", nil, soon)
	m.expect(t, "ivrsched_provider_requests_total", nil, soon)
	m.expectHistogramCount(t, "ivrsched_provider_request_duration_seconds", soon)
	m.expect(t, "ivrsched_dialer_calls_in_flight", nil, 0)
	m.expectHistogramCount(t, "ivrsched_dialer_rate_limit_wait_seconds", soon)
	m.expect(t, "ivrsched_dialer_rate_limit_cps", nil, 1000)
	if ticks := m.sum("ivrsched_ticks_total", nil); ticks < 1 {
		t.Errorf("ivrsched_ticks_total = %v, want ticks", ticks)
	}

	// The later users: some rescheduled, then all cancelled or forgotten.
	for i := range resched {
		send(fmt.Sprint("later-", i), &pb.Command{Command: &pb.Command_Reschedule{Reschedule: &pb.Reschedule{TaskId: "call",
			When: &pb.Reschedule_Delay{Delay: durationpb.New(2 * time.Hour)}}}})
	}
	for i := range later {
		if i < forget {
			send(fmt.Sprint("later-", i), &pb.Command{Command: &pb.Command_Forget{Forget: &pb.Forget{}}})
			continue
		}
		send(fmt.Sprint("later-", i), &pb.Command{Command: &pb.Command_Cancel{Cancel: &pb.Cancel{TaskId: "call"}}})
	}
	commands += resched + later
	await(t, done, "the reschedules, cancels and forgets processed", func() bool { return run.Scheduler.Stats.Commands.Load() == commands })

	m = scrape(t, web)
	m.expect(t, "ivrsched_followups_pending", nil, 0)
	m.expect(t, "ivrsched_followups_rescheduled_total", nil, resched)
	m.expect(t, "ivrsched_followups_cancelled_total", nil, later-forget)
	m.expect(t, "ivrsched_users_forgotten_total", nil, forget)
	m.expect(t, "ivrsched_followups_fired_total", nil, soon)
	m.expectHistogramCount(t, "ivrsched_fire_lateness_seconds", soon)
	t.Logf("lateness: %d follow-ups, mean %.1f ms", soon, 1000*m.histogramSum("ivrsched_fire_lateness_seconds")/soon)

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

// await polls cond until it holds (60 s at most), failing if the run ends.
func await(t *testing.T, done <-chan error, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for !cond() {
		select {
		case <-deadline:
			t.Fatalf("not after 60s: %s", what)
		case err := <-done:
			t.Fatalf("run ended: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// scraped is one scrape of /metrics, parsed.
type scraped map[string]*dto.MetricFamily

func scrape(t *testing.T, web string) scraped {
	t.Helper()
	resp, err := http.Get("http://" + web + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("/metrics = %d: %s", resp.StatusCode, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return fams
}

// matches reports whether m has every label of want.
func matches(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// sum adds the counter or gauge values of name's series with labels.
func (s scraped) sum(name string, labels map[string]string) float64 {
	total := 0.0
	for _, m := range s[name].GetMetric() {
		if matches(m, labels) {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

func (s scraped) series(name string) int { return len(s[name].GetMetric()) }

func (s scraped) expect(t *testing.T, name string, labels map[string]string, want float64) {
	t.Helper()
	if s[name] == nil {
		t.Errorf("/metrics has no %s", name)
		return
	}
	if got := s.sum(name, labels); got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

func (s scraped) expectHistogramCount(t *testing.T, name string, want uint64) {
	t.Helper()
	ms := s[name].GetMetric()
	if len(ms) != 1 {
		t.Errorf("/metrics has %d series of %s, want 1", len(ms), name)
		return
	}
	if got := ms[0].GetHistogram().GetSampleCount(); got != want {
		t.Errorf("%s count = %d, want %d", name, got, want)
	}
}

func (s scraped) histogramSum(name string) float64 {
	ms := s[name].GetMetric()
	if len(ms) != 1 {
		return 0
	}
	return ms[0].GetHistogram().GetSampleSum()
}
