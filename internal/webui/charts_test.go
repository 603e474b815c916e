package webui

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ivrsched/ivrsched/internal/admin"
)

// element is an element of a chart: its name, attributes and the text
// of its <title> child, if any.
type element struct {
	name  string
	attr  map[string]string
	title string
}

// parseChart parses a chart's markup as XML (it must be well-formed) and
// returns its elements in document order.
func parseChart(t *testing.T, markup string) []element {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(markup))
	var out []element
	var stack []int
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the chart is not well-formed: %v\n%s", err, markup)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			e := element{name: x.Name.Local, attr: map[string]string{}}
			for _, a := range x.Attr {
				e.attr[a.Name.Local] = a.Value
			}
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if n := len(stack); n >= 2 && out[stack[n-1]].name == "title" {
				out[stack[n-2]].title += string(x)
			}
		}
	}
	return out
}

// bars returns the chart's elements of class.
func bars(es []element, class string) []element {
	var out []element
	for _, e := range es {
		if e.attr["class"] == class {
			out = append(out, e)
		}
	}
	return out
}

func count(t *testing.T, e element) int {
	t.Helper()
	n, err := strconv.Atoi(e.attr["data-count"])
	if err != nil {
		t.Fatalf("%s without a count: %v", e.name, e.attr)
	}
	return n
}

// The upcoming chart has a bar per hour and campaign with a count, whose
// counts add up to each hour's, a capacity line at calls per hour, the
// hours behind marked, a title and axis labels; campaign names are text.
func TestUpcomingChart(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	h := admin.UpcomingHours{Start: t0, CPS: 0.01, PerHour: 36, Dialers: 1}
	for i := range 48 {
		h.Hours = append(h.Hours, admin.HourCount{Start: t0.Add(time.Duration(i) * time.Hour), Campaigns: map[string]int{}})
	}
	h.Hours[9] = admin.HourCount{Start: h.Hours[9].Start, Total: 50, Campaigns: map[string]int{"spring": 30, `<script>x</script>`: 20}}
	h.Hours[14] = admin.HourCount{Start: h.Hours[14].Start, Total: 10, Campaigns: map[string]int{"spring": 10}}
	markup := UpcomingChart(h)
	if strings.Contains(markup, "<script>") {
		t.Fatalf("a campaign's name is markup:\n%s", markup)
	}
	es := parseChart(t, markup)
	bs := bars(es, "bar")
	if len(bs) != 3 {
		t.Fatalf("%d bars, want 3", len(bs))
	}
	per := map[string]int{}
	for _, b := range bs {
		per[b.attr["data-hour"]+"/"+b.attr["data-series"]] += count(t, b)
	}
	if per["2026-12-03T09:00Z/spring"] != 30 || per["2026-12-03T09:00Z/<script>x</script>"] != 20 || per["2026-12-03T14:00Z/spring"] != 10 {
		t.Fatalf("bars %v", per)
	}
	var capLine, behind, svg []element
	for _, e := range es {
		switch {
		case e.attr["class"] == "capacity":
			capLine = append(capLine, e)
		case e.attr["class"] == "behind":
			behind = append(behind, e)
		case e.name == "svg":
			svg = append(svg, e)
		}
	}
	if len(capLine) != 1 || capLine[0].attr["data-calls-per-hour"] != "36" || capLine[0].attr["y1"] != capLine[0].attr["y2"] {
		t.Fatalf("capacity line %v", capLine)
	}
	if len(behind) != 1 || !strings.Contains(behind[0].title, "14 calls wait") { // 50 − 36 at 09:00, placed by 10:00
		t.Fatalf("hours behind: %v", behind)
	}
	if len(svg) != 1 || svg[0].attr["role"] != "img" || svg[0].attr["data-total"] != "60" || svg[0].title != "Upcoming calls per hour (UTC), next 48 hours, by campaign" {
		t.Fatalf("svg %v (title %q)", svg, svg[0].title)
	}
	for _, want := range []string{`class="axis-label x"`, `class="axis-label y"`, "<desc", "The dialers fall behind from Dec 3 09:00Z"} {
		if !strings.Contains(markup, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	// Bars of one hour stack: each starts where the one below ends.
	y0, _ := strconv.ParseFloat(bs[0].attr["y"], 64)
	y1, _ := strconv.ParseFloat(bs[1].attr["y"], 64)
	h1, _ := strconv.ParseFloat(bs[1].attr["height"], 64)
	if d := y1 + h1 - y0; d < -0.2 || d > 0.2 {
		t.Errorf("the hour's bars do not stack: %v over %v", bs[1].attr, bs[0].attr)
	}
}

// The answer chart has a bar per local hour and outcome with a count.
func TestAnswersChart(t *testing.T) {
	a := admin.AnswerRates{Hours: make([]admin.AnswerHour, 24), UnknownZone: 4, CaughtUp: true}
	for i := range a.Hours {
		a.Hours[i].Hour = i
	}
	a.Hours[9] = admin.AnswerHour{Hour: 9, Answered: 3, NoAnswer: 1}
	a.Hours[18] = admin.AnswerHour{Hour: 18, Busy: 2, Failed: 1, Other: 1}
	es := parseChart(t, AnswersChart(a))
	bs := bars(es, "bar")
	got := map[string]int{}
	for _, b := range bs {
		got[b.attr["data-hour"]+"/"+b.attr["data-series"]] = count(t, b)
	}
	want := map[string]int{"9/answered": 3, "9/no_answer": 1, "18/busy": 2, "18/failed": 1, "18/other": 1}
	if len(got) != len(want) {
		t.Fatalf("bars %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %d, want %d", k, got[k], v)
		}
	}
	for _, e := range es {
		if e.name == "g" && e.attr["data-hour"] == "9" && e.attr["data-answer-rate"] != "75" {
			t.Errorf("09:00's answer rate %q", e.attr["data-answer-rate"])
		}
	}
}

// The lateness chart has a point pair per minute in which something fired.
func TestLatenessChart(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	var ms []admin.LatenessMinute
	for i := range 60 {
		ms = append(ms, admin.LatenessMinute{Minute: t0.Add(time.Duration(i) * time.Minute)})
	}
	ms[10] = admin.LatenessMinute{Minute: ms[10].Minute, Count: 5, P50: 0.002, P99: 0.4}
	ms[11] = admin.LatenessMinute{Minute: ms[11].Minute, Count: 7, P50: 0.003, P99: 0.01}
	es := parseChart(t, LatenessChart(ms))
	var minutes, points, lines int
	for _, e := range es {
		switch {
		case e.attr["class"] == "minute":
			minutes++
			if e.attr["data-minute"] == "2026-12-03T14:10:00Z" && (e.attr["data-count"] != "5" || e.attr["data-p99"] != "0.4") {
				t.Errorf("minute 14:10: %v", e.attr)
			}
		case strings.HasPrefix(e.attr["class"], "point "):
			points++
		case strings.HasPrefix(e.attr["class"], "line "):
			lines++
		}
	}
	if minutes != 2 || points != 4 || lines != 2 {
		t.Fatalf("%d minutes, %d points, %d lines", minutes, points, lines)
	}
}

// The page shows the charts of the sources it has, and a source's error
// instead of its chart.
func TestPageShowsTheCharts(t *testing.T) {
	srv := httptest.NewServer(Handler(Source{
		UpcomingHours: func(context.Context) (admin.UpcomingHours, error) {
			return admin.UpcomingHours{Start: time.Now().Truncate(time.Hour), Hours: []admin.HourCount{{Total: 1, Campaigns: map[string]int{"c": 1}}}}, nil
		},
		Answers: func(context.Context) (admin.AnswerRates, error) {
			return admin.AnswerRates{}, errors.New("no results topic")
		},
		Lateness: func(context.Context) ([]admin.LatenessMinute, error) {
			return []admin.LatenessMinute{{Minute: time.Now(), Count: 1, P50: 0.01, P99: 0.01}}, nil
		},
	}))
	defer srv.Close()
	page := pageOf(t, srv.URL+"/ui/")
	for _, want := range []string{`id="chart-upcoming"`, `id="chart-lateness"`, "answer rate chart: no results topic", `data-series="c" data-count="1"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, `id="chart-answers"`) {
		t.Error("the page shows the answer chart despite its error")
	}
}

// The held follow-ups (counted in their hours) and the parked ones (in no
// hour) are said beside the bars, in the caption and as attributes; with
// neither the caption says nothing of them.
func TestUpcomingChartSaysHeldAndParked(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	h := admin.UpcomingHours{Start: t0, Dialers: 1, Held: 2, Parked: 3, Hours: []admin.HourCount{
		{Start: t0, Total: 5, Campaigns: map[string]int{"spring": 5}},
	}}
	markup := UpcomingChart(h)
	var svg []element
	for _, e := range parseChart(t, markup) {
		if e.name == "svg" {
			svg = append(svg, e)
		}
	}
	if len(svg) != 1 || svg[0].attr["data-total"] != "5" || svg[0].attr["data-held"] != "2" || svg[0].attr["data-parked"] != "3" {
		t.Fatalf("svg %v", svg)
	}
	for _, want := range []string{`provider takes them. <span class="aside">2 of them held (a wake fires each at its hour); 3 more parked: due, waiting for the calling policy to move them, in no hour.</span>`} {
		if !strings.Contains(markup, want) {
			t.Errorf("chart lacks %q:\n%s", want, markup)
		}
	}
	h.Held, h.Parked = 0, 0
	if markup := UpcomingChart(h); strings.Contains(markup, `class="aside"`) || strings.Contains(markup, "parked:") || strings.Contains(markup, "held (") {
		t.Errorf("with none held or parked the chart says so:\n%s", markup)
	}
}
