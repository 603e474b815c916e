package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/topology"
)

// artifactsDir is where a test saves what a person looks at (screenshots):
// $IVRSCHED_ARTIFACTS/<test name> if set (kept), else the test's temp dir.
func artifactsDir(t *testing.T) string {
	t.Helper()
	base := os.Getenv("IVRSCHED_ARTIFACTS")
	if base == "" {
		return t.TempDir()
	}
	dir := filepath.Join(base, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openZone is a zone where it is midday now: an Etc/GMT zone, whose sign
// is POSIX's (Etc/GMT-3 is three hours ahead of UTC).
func openZone(now time.Time) string {
	off := (12 - now.UTC().Hour() + 24) % 24
	if off > 12 {
		off -= 24
	}
	if off == 0 {
		return "Etc/GMT"
	}
	return fmt.Sprintf("Etc/GMT%+d", -off)
}

// nextLocal is the first instant after now at which it is hour:00 in loc.
func nextLocal(now time.Time, loc *time.Location, hour int) time.Time {
	l := now.In(loc)
	t := time.Date(l.Year(), l.Month(), l.Day(), hour, 0, 0, 0, loc)
	if !t.After(now) {
		t = t.AddDate(0, 0, 1)
	}
	return t
}

// The web page's charts in headless Chromium on `ivrsched run` with data
// in it: follow-ups in four zones due in their night bunch at 09:00 local
// under a 09:00 to 20:00 policy, above the dialer's --cps line; results
// of the last days by the recipient's local hour; the lateness of a few
// fires. Each chart's bars (points) carry the counts the admin API's JSON
// gives for the same data, and `upcoming --histogram` prints them too.
// Screenshots of the charts go to the test's artifacts (artifactsDir).
func TestChartsInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	dir := artifactsDir(t)
	r := startRun(t, "--cps", "0.01") // 36 calls an hour
	r.awaitReady()
	r.setPolicy("default:\n  open_hours: [{days: [mon, tue, wed, thu, fri, sat, sun], from: \"09:00\", to: \"20:00\"}]\n")
	now := time.Now()
	rng := rand.New(rand.NewPCG(33, 1))

	// Onboard: per zone 50 follow-ups due in the local night (deferred to
	// 09:00 local), 10 more at random in the next day's open hours, and 4
	// due now where it is midday (they fire: the lateness chart; the
	// dialer places the first at once and its result counts too).
	em, err := goka.NewEmitter([]string{r.broker}, topology.NewTopics("").Onboarding, new(codec.Command), goka.WithEmitterHasher(topology.Murmur2()))
	if err != nil {
		t.Fatal(err)
	}
	pending, users := 0, 0
	onboard := func(user, zone, campaign string, due time.Time) {
		t.Helper()
		users++
		c := &pb.Command{UserId: user, RequestedAt: timestamppb.New(now), Command: &pb.Command_Onboard{Onboard: &pb.Onboard{
			Phone: fmt.Sprintf("+1415555%04d", 100+users%100), TimeZone: zone,
			FollowUps: []*pb.FollowUp{{TaskId: "t1", When: &pb.FollowUp_DueAt{DueAt: timestamppb.New(due)}, Action: &pb.Action{IvrScript: "welcome", CampaignId: campaign}}},
		}}}
		if _, err := em.Emit(user, c); err != nil {
			t.Fatal(err)
		}
	}
	campaigns := []string{"spring", "spring", "renewal", "winback"}
	for zi, zone := range []string{"America/New_York", "Europe/Berlin", "Asia/Tokyo", "America/Los_Angeles"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		night := nextLocal(now, loc, 3)
		for i := range 50 {
			onboard(fmt.Sprintf("night-%d-%02d", zi, i), zone, campaigns[rng.IntN(len(campaigns))], night.Add(time.Duration(i)*time.Minute))
			pending++
		}
		for i := range 10 {
			onboard(fmt.Sprintf("day-%d-%02d", zi, i), zone, campaigns[rng.IntN(len(campaigns))], nextLocal(now, loc, 10).Add(time.Duration(rng.IntN(9*60))*time.Minute))
			pending++
		}
	}
	for i := range 4 {
		onboard(fmt.Sprintf("now-%d", i), openZone(now), "spring", now)
	}
	// Results of the last 6 days: answered more often in the evening.
	rem, err := goka.NewEmitter([]string{r.broker}, topology.NewTopics("").Results, new(codec.CallResult))
	if err != nil {
		t.Fatal(err)
	}
	zones := []string{"America/New_York", "Europe/Berlin", "Asia/Tokyo", "America/Los_Angeles"}
	const results, unknown = 400, 7
	for i := range results + unknown {
		zone := zones[rng.IntN(len(zones))]
		if i >= results {
			zone = "" // published before the dialer recorded zones
		}
		at := now.Add(-time.Duration(rng.IntN(6*24*60)) * time.Minute)
		loc, _ := time.LoadLocation(zone)
		o := pb.Outcome_OUTCOME_NO_ANSWER
		switch p, evening := rng.Float64(), at.In(loc).Hour() >= 17; {
		case p < 0.35 || (evening && p < 0.7):
			o = pb.Outcome_OUTCOME_ANSWERED
		case p < 0.8:
			o = pb.Outcome_OUTCOME_NO_ANSWER
		case p < 0.9:
			o = pb.Outcome_OUTCOME_BUSY
		case p < 0.97:
			o = pb.Outcome_OUTCOME_FAILED
		default:
			o = pb.Outcome_OUTCOME_MACHINE
		}
		user := fmt.Sprintf("past-%03d", i)
		if _, err := rem.Emit(user, &pb.CallResult{CallId: user, UserId: user, TaskId: "t1", Attempt: 1, Outcome: o, Final: true, At: timestamppb.New(at), RecipientZone: zone}); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range []*goka.Emitter{em, rem} {
		if err := e.Finish(); err != nil {
			t.Fatal(err)
		}
	}

	// Wait (the admin API has no event to await) until the scheduler has
	// indexed every follow-up and fired those due now, and the instance
	// has read every result.
	getJSON := func(path string, v any) {
		t.Helper()
		code, body := r.get(path, false)
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		if err := json.Unmarshal([]byte(body), v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var hours admin.UpcomingHours
	var answers admin.AnswerRates
	var lateness admin.LatenessSeries
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		getJSON("/admin/charts/upcoming?hours=48", &hours)
		getJSON("/admin/charts/answers", &answers)
		getJSON("/admin/charts/lateness", &lateness)
		total, counted, fired := 0, uint64(0), uint64(0)
		for _, h := range hours.Hours {
			total += h.Total
		}
		for _, h := range answers.Hours {
			counted += h.Total()
		}
		for _, m := range lateness.Minutes {
			fired += m.Count
		}
		if total == pending && answers.CaughtUp && counted >= results && answers.UnknownZone == unknown && fired >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending %d of %d, results %d of %d (%d of %d without a zone, caught up %v), fired %d of 4", total, pending, counted, results, answers.UnknownZone, unknown, answers.CaughtUp, fired)
		}
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1280, 1000))
	actx, acancel := chromedp.NewExecAllocator(r.ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	bctx, tcancel := context.WithTimeout(bctx, 60*time.Second)
	defer tcancel()
	shot := func(id string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			png, err := chromedp.Screenshot(chromedp.CSS("#"+id))(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, os.WriteFile(filepath.Join(dir, strings.TrimPrefix(id, "chart-")+".png"), png, 0o644)
		}
	}
	// eval runs a script that returns JSON and decodes it into v.
	eval := func(script string, v any) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			s, err := chromedp.Evaluate[string](script)(ctx, tg)
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, json.Unmarshal([]byte(s), v)
		}
	}
	type bar struct {
		Hour, Series string
		Count        int
	}
	bars := func(chart string) string {
		return `JSON.stringify(Array.from(document.querySelectorAll("#` + chart + ` rect.bar")).map(r => ({Hour: r.dataset.hour, Series: r.dataset.series, Count: +r.dataset.count})))`
	}
	// compare loads the page and returns how its charts differ from the
	// admin API's JSON read after it (nothing: they agree). The dialer's
	// result of a call placed meanwhile may change the answers between the
	// two: the caller tries again.
	var hours48 admin.UpcomingHours
	compare := func() []string {
		t.Helper()
		var upBars, ansBars []bar
		var minutes []struct {
			Minute string
			Count  uint64
		}
		var svg struct {
			Start, PerHour, Title, Labels string
			Behind                        int
		}
		if err := chromedp.Do(bctx,
			chromedp.Navigate("http://"+r.web+"/ui/"),
			chromedp.WaitVisible(chromedp.CSS("#chart-upcoming rect.bar")),
			eval(bars("chart-upcoming"), &upBars),
			eval(bars("chart-answers"), &ansBars),
			eval(`JSON.stringify(Array.from(document.querySelectorAll("#chart-lateness g.minute")).map(g => ({Minute: g.dataset.minute, Count: +g.dataset.count})))`, &minutes),
			eval(`(() => { const s = document.querySelector("#chart-upcoming svg"); return JSON.stringify({
				Start: s.dataset.start, PerHour: document.querySelector("#chart-upcoming line.capacity").dataset.callsPerHour,
				Title: s.querySelector("title").textContent, Behind: s.querySelectorAll("rect.behind").length,
				Labels: Array.from(s.querySelectorAll(".axis-label")).map(e => e.textContent).join("|") }) })()`, &svg),
			shot("chart-upcoming"), shot("chart-answers"), shot("chart-lateness"),
		); err != nil {
			t.Fatalf("browser: %v", err)
		}
		var diffs []string

		// The upcoming chart: a bar per hour and campaign, as the admin
		// API counts from the page's start; the capacity line at 36 an hour.
		getJSON("/admin/charts/upcoming?hours=48&from="+svg.Start, &hours48)
		want := map[string]int{}
		sum, peak := 0, 0
		for _, h := range hours48.Hours {
			for c, n := range h.Campaigns {
				if n > 0 {
					want[h.Start.UTC().Format("2006-01-02T15:04Z")+"/"+c] = n
				}
			}
			sum += h.Total
			peak = max(peak, h.Total)
		}
		got := map[string]int{}
		for _, b := range upBars {
			got[b.Hour+"/"+b.Series] += b.Count
		}
		if len(upBars) != len(want) || fmt.Sprint(got) != fmt.Sprint(want) || sum != pending {
			diffs = append(diffs, fmt.Sprintf("upcoming bars (%d):\n%v\nthe admin API's (%d, %d follow-ups):\n%v", len(upBars), got, len(want), sum, want))
		}
		if peak < 40 || svg.PerHour != "36" || svg.Behind == 0 {
			diffs = append(diffs, fmt.Sprintf("the bunch at 09:00 local: %d in the busiest hour; capacity line %q; %d hours behind", peak, svg.PerHour, svg.Behind))
		}
		if !strings.Contains(svg.Title, "Upcoming calls per hour") || !strings.Contains(svg.Labels, "hour (UTC)") || !strings.Contains(svg.Labels, "follow-ups due") {
			diffs = append(diffs, fmt.Sprintf("upcoming chart's title %q, axis labels %q", svg.Title, svg.Labels))
		}

		// The answer chart: a bar per local hour and outcome, as the API says.
		getJSON("/admin/charts/answers", &answers)
		want = map[string]int{}
		for _, h := range answers.Hours {
			for name, n := range map[string]uint64{"answered": h.Answered, "no_answer": h.NoAnswer, "busy": h.Busy, "failed": h.Failed, "other": h.Other} {
				if n > 0 {
					want[fmt.Sprintf("%d/%s", h.Hour, name)] = int(n)
				}
			}
		}
		got = map[string]int{}
		for _, b := range ansBars {
			got[b.Hour+"/"+b.Series] += b.Count
		}
		if len(ansBars) != len(want) || fmt.Sprint(got) != fmt.Sprint(want) {
			diffs = append(diffs, fmt.Sprintf("answer bars (%d):\n%v\nthe admin API's (%d):\n%v", len(ansBars), got, len(want), want))
		}

		// The lateness chart: a point pair per minute with fires, as the
		// API counts them (minutes in both: the hour may have moved on).
		getJSON("/admin/charts/lateness", &lateness)
		byMinute := map[string]uint64{}
		for _, m := range lateness.Minutes {
			byMinute[m.Minute.UTC().Format(time.RFC3339)] = m.Count
		}
		var fired uint64
		for _, m := range minutes {
			if n, ok := byMinute[m.Minute]; ok && n != m.Count {
				diffs = append(diffs, fmt.Sprintf("minute %s: %d on the page, %d in the API", m.Minute, m.Count, n))
			}
			fired += m.Count
		}
		if len(minutes) == 0 || fired < 4 {
			diffs = append(diffs, fmt.Sprintf("lateness points %v", minutes))
		}
		return diffs
	}
	for attempt := 1; ; attempt++ {
		diffs := compare()
		if len(diffs) == 0 {
			break
		}
		if attempt == 3 {
			t.Fatalf("the charts differ from the admin API:\n%s", strings.Join(diffs, "\n"))
		}
		t.Logf("attempt %d: %s", attempt, strings.Join(diffs, "\n"))
	}

	// The CLI prints the same numbers, and the capacity.
	var cli admin.UpcomingHours
	if err := json.Unmarshal([]byte(r.cli("upcoming", "--histogram", "--json")), &cli); err != nil {
		t.Fatal(err)
	}
	if cli.PerHour != 36 || cli.Dialers != 1 || !cli.Start.Equal(hours48.Start) || fmt.Sprint(cli.Hours) != fmt.Sprint(hours48.Hours) {
		t.Fatalf("upcoming --histogram --json: %+v\nwant the hours of %+v", cli, hours48)
	}
	table := r.cli("upcoming", "--histogram", "--hours", "24")
	if !strings.Contains(table, "# capacity: 36 calls an hour (--cps 0.01; dialer instances: 1)") || strings.Count(table, "\n") != 26 {
		t.Fatalf("upcoming --histogram --hours 24:\n%s", table)
	}
	for _, f := range []string{"upcoming.png", "answers.png", "lateness.png"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() < 1000 {
			t.Fatalf("screenshot %s: %v", f, err)
		}
	}
	t.Logf("chart screenshots in %s", dir)
	r.stop()
}
