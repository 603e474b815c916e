package webui

import (
	"context"
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ivrsched/ivrsched/internal/admin"
)

// The page's charts are SVG drawn here, on the server: no script, nothing
// fetched, the page's Content-Security-Policy unchanged (SVG's
// presentation attributes are not styles). Each chart is a <figure> whose
// <svg role="img"> is labelled by its <title> and <desc>; each bar or
// point carries its numbers in data-* attributes (data-count, ...), one
// <rect class="bar"> per hour and series with a count.

// ChartHours is how many hours the upcoming chart shows.
const ChartHours = 48

// Chart geometry, in SVG user units.
const (
	chartW, chartH           = 960, 300
	padL, padR, padT, padB   = 76, 170, 46, 58
	plotW, plotH             = chartW - padL - padR, chartH - padT - padB
	legendX                  = chartW - padR + 16
	maxLegendLabel           = 24
	answersTitle             = "Answer rate by the recipient's local hour, last 7 days"
	latenessTitle            = "Fire lateness per minute, last hour (p50 and p99)"
	upcomingTitleFormat      = "Upcoming calls per hour (UTC), next %d hours, by campaign"
	capacityColor, overColor = "#c0392b", "#c0392b"
)

var palette = []string{"#4e79a7", "#f28e2b", "#76b7b2", "#b07aa1", "#edc948", "#9c755f", "#ff9da7", "#59a14f", "#bab0ac", "#e15759", "#8cd17d"}

// charts draws the charts whose sources are set; a source's error is
// reported, its chart left out.
func (s Source) charts(ctx context.Context, fail func(string, error)) template.HTML {
	var b strings.Builder
	if s.UpcomingHours != nil {
		if h, err := s.UpcomingHours(ctx); err != nil {
			fail("upcoming chart", err)
		} else {
			b.WriteString(UpcomingChart(h))
		}
	}
	if s.Answers != nil {
		if a, err := s.Answers(ctx); err != nil {
			fail("answer rate chart", err)
		} else {
			b.WriteString(AnswersChart(a))
		}
	}
	if s.Lateness != nil {
		if l, err := s.Lateness(ctx); err != nil {
			fail("lateness chart", err)
		} else {
			b.WriteString(LatenessChart(l))
		}
	}
	return template.HTML(b.String()) // every text in it is escaped (esc)
}

// esc escapes text for SVG's text and attributes.
func esc(s string) string { return html.EscapeString(s) }

// num formats a coordinate.
func num(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// svgOpen starts a figure and its svg, labelled by title and desc.
func svgOpen(b *strings.Builder, id, title, desc string, attrs string) {
	fmt.Fprintf(b, `<figure id="%s" class="chart"><svg xmlns="http://www.w3.org/2000/svg" role="img" width="%d" height="%d" viewBox="0 0 %d %d" aria-labelledby="%s-title %s-desc" font-family="system-ui, sans-serif" font-size="12"%s>`,
		id, chartW, chartH, chartW, chartH, id, id, attrs)
	fmt.Fprintf(b, `<title id="%s-title">%s</title><desc id="%s-desc">%s</desc>`, id, esc(title), id, esc(desc))
	fmt.Fprintf(b, `<rect x="0" y="0" width="%d" height="%d" fill="#fff"/>`, chartW, chartH)
	fmt.Fprintf(b, `<text class="chart-title" x="%d" y="20" font-size="15" font-weight="bold">%s</text>`, padL, esc(title))
}

// axes draws the plot's frame and its axis labels.
func axes(b *strings.Builder, xLabel, yLabel string) {
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444"/>`, padL, padT+plotH, padL+plotW, padT+plotH)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444"/>`, padL, padT, padL, padT+plotH)
	fmt.Fprintf(b, `<text class="axis-label x" x="%s" y="%d" text-anchor="middle">%s</text>`, num(padL+plotW/2.0), chartH-8, esc(xLabel))
	fmt.Fprintf(b, `<text class="axis-label y" transform="translate(16 %s) rotate(-90)" text-anchor="middle">%s</text>`, num(padT+plotH/2.0), esc(yLabel))
}

// yTicks draws horizontal grid lines and labels at the values of ticks
// (scale maps a value to y).
func yTicks(b *strings.Builder, ticks []float64, scale func(float64) float64, label func(float64) string) {
	for _, v := range ticks {
		y := scale(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#e4e4e4"/>`, padL, num(y), padL+plotW, num(y))
		fmt.Fprintf(b, `<text x="%d" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`, padL-6, num(y), esc(label(v)))
	}
}

// niceTicks returns about five round tick values from 0 to at least top.
func niceTicks(top float64) []float64 {
	if top <= 0 {
		top = 1
	}
	step := math.Pow(10, math.Floor(math.Log10(top/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if top/(step*m) <= 6 {
			step *= m
			break
		}
	}
	step = max(step, 1)
	var out []float64
	for v := 0.0; v <= top+step/2; v += step {
		out = append(out, v)
	}
	return out
}

// legend draws a color key.
func legend(b *strings.Builder, names, colors []string) {
	for i, n := range names {
		y := padT + 4 + i*18
		if r := []rune(n); len(r) > maxLegendLabel {
			n = string(r[:maxLegendLabel-1]) + "…"
		}
		fmt.Fprintf(b, `<rect class="legend-key" x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`, legendX, y, colors[i], legendX+18, y+10, esc(n))
	}
}

// asideText says how many of the follow-ups counted are held and how many
// are parked (in no hour); "" if none is either.
func asideText(h admin.UpcomingHours) string {
	var parts []string
	if h.Held > 0 {
		parts = append(parts, fmt.Sprintf("%d of them held (a wake fires each at its hour)", h.Held))
	}
	if h.Parked > 0 {
		parts = append(parts, fmt.Sprintf("%d more parked: due, waiting for the calling policy to move them, in no hour", h.Parked))
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, "; ") + "."
}

// UpcomingChart draws the follow-ups due per hour, stacked by campaign,
// and the dialers' capacity per hour across them. Each hour whose calls
// and those left from the hours before exceed the capacity is marked
// behind (data-behind, a red mark under its bar).
func UpcomingChart(h admin.UpcomingHours) string {
	campaigns := admin.Campaigns(h.Hours)
	colors := make([]string, len(campaigns))
	for i := range campaigns {
		colors[i] = palette[i%len(palette)]
	}
	totals := make([]int, len(h.Hours))
	top := 0
	for i, hc := range h.Hours {
		totals[i] = hc.Total
		top = max(top, hc.Total)
	}
	backlog := admin.Backlog(totals, h.PerHour)
	yMax := float64(top)
	if h.PerHour > 0 {
		yMax = max(yMax, h.PerHour)
	}
	ticks := niceTicks(yMax * 1.05)
	yMax = ticks[len(ticks)-1]
	scale := func(v float64) float64 { return padT + plotH - v/yMax*plotH }
	title := fmt.Sprintf(upcomingTitleFormat, len(h.Hours))
	var b strings.Builder
	sum := 0
	for _, n := range totals {
		sum += n
	}
	desc := fmt.Sprintf("%d follow-ups due in the next %d hours from %s, stacked by campaign per hour;", sum, len(h.Hours), h.Start.UTC().Format("2006-01-02 15:04Z"))
	capText := "no --cps limit: the dialers place calls as fast as the provider takes them"
	switch {
	case h.Dialers == 0:
		capText = "no dialer instance answered: the capacity is unknown"
	case h.PerHour > 0:
		capText = fmt.Sprintf("the dialers place at most %s calls an hour (--cps %s)", strconv.FormatFloat(h.PerHour, 'f', -1, 64), strconv.FormatFloat(h.CPS, 'f', -1, 64))
	}
	desc += " " + capText + "."
	aside := asideText(h)
	if aside != "" {
		desc += " " + aside
	}
	svgOpen(&b, "chart-upcoming", title, desc, fmt.Sprintf(` data-start="%s" data-hours="%d" data-calls-per-hour="%s" data-total="%d" data-held="%d" data-parked="%d"`,
		h.Start.UTC().Format(time.RFC3339), len(h.Hours), strconv.FormatFloat(h.PerHour, 'f', -1, 64), sum, h.Held, h.Parked))
	yTicks(&b, ticks, scale, func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) })
	n := max(len(h.Hours), 1)
	slot := float64(plotW) / float64(n)
	w := max(slot*0.8, 1)
	firstBehind := -1
	for i, hc := range h.Hours {
		x := padL + float64(i)*slot + (slot-w)/2
		hour := hc.Start.UTC().Format("2006-01-02T15:04Z")
		fmt.Fprintf(&b, `<g class="hour" data-hour="%s" data-total="%d" data-backlog="%s">`, hour, hc.Total, num(backlog[i]))
		y := float64(padT + plotH)
		for ci, c := range campaigns {
			cnt := hc.Campaigns[c]
			if cnt == 0 {
				continue
			}
			hgt := float64(cnt) / yMax * plotH
			y -= hgt
			fmt.Fprintf(&b, `<rect class="bar" data-hour="%s" data-series="%s" data-count="%d" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s: %d of campaign %s</title></rect>`,
				hour, esc(c), cnt, num(x), num(y), num(w), num(max(hgt, 0.5)), colors[ci], esc(hc.Start.UTC().Format("Jan 2 15:00")), cnt, esc(c))
		}
		if backlog[i] > 0 {
			if firstBehind < 0 {
				firstBehind = i
			}
			fmt.Fprintf(&b, `<rect class="behind" x="%s" y="%d" width="%s" height="4" fill="%s"><title>%s: %s calls wait for the next hour</title></rect>`,
				num(x), padT+plotH+2, num(w), overColor, esc(hc.Start.UTC().Format("Jan 2 15:00")), num(backlog[i]))
		}
		b.WriteString(`</g>`)
		if hc.Start.UTC().Hour()%6 == 0 {
			label := hc.Start.UTC().Format("15:00")
			if hc.Start.UTC().Hour() == 0 {
				label = hc.Start.UTC().Format("Jan 2")
			}
			fmt.Fprintf(&b, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#444"/><text x="%s" y="%d" text-anchor="middle">%s</text>`,
				num(padL+float64(i)*slot), padT+plotH, num(padL+float64(i)*slot), padT+plotH+10, num(padL+float64(i)*slot), padT+plotH+22, label)
		}
	}
	if h.PerHour > 0 {
		y := scale(h.PerHour)
		fmt.Fprintf(&b, `<line class="capacity" data-calls-per-hour="%s" x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s" stroke-width="2" stroke-dasharray="6 4"/>`,
			strconv.FormatFloat(h.PerHour, 'f', -1, 64), padL, num(y), padL+plotW, num(y), capacityColor)
		fmt.Fprintf(&b, `<text x="%d" y="%s" fill="%s">capacity %s/h</text>`, padL+plotW+4, num(y+4), capacityColor, strconv.FormatFloat(h.PerHour, 'f', -1, 64))
	}
	axes(&b, "hour (UTC); a red mark: calls wait for a later hour", "follow-ups due")
	legend(&b, campaigns, colors)
	b.WriteString(`</svg><figcaption>`)
	b.WriteString(esc(strings.ToUpper(capText[:1]) + capText[1:]))
	if firstBehind >= 0 {
		peak, at := 0.0, 0
		for i, v := range backlog {
			if v > peak {
				peak, at = v, i
			}
		}
		fmt.Fprintf(&b, `. <b class="behind-note">The dialers fall behind from %s: up to %s calls wait, at %s.</b>`,
			esc(h.Hours[firstBehind].Start.UTC().Format("Jan 2 15:00Z")), num(peak), esc(h.Hours[at].Start.UTC().Format("Jan 2 15:00Z")))
	} else if h.PerHour > 0 {
		b.WriteString(". The dialers keep up with every hour shown.")
	} else {
		b.WriteString(".")
	}
	if aside != "" {
		fmt.Fprintf(&b, ` <span class="aside">%s</span>`, esc(aside))
	}
	if h.Truncated {
		b.WriteString(" More follow-ups than an instance counts at once: the later hours are short.")
	}
	if len(h.Missing) > 0 {
		fmt.Fprintf(&b, " Partitions %v did not answer: their follow-ups are missing.", h.Missing)
	}
	b.WriteString(`</figcaption></figure>`)
	return b.String()
}

// outcomes are the answer chart's series, bottom up.
var outcomes = []struct {
	name, color string
	count       func(admin.AnswerHour) uint64
}{
	{"answered", "#59a14f", func(h admin.AnswerHour) uint64 { return h.Answered }},
	{"no_answer", "#edc948", func(h admin.AnswerHour) uint64 { return h.NoAnswer }},
	{"busy", "#f28e2b", func(h admin.AnswerHour) uint64 { return h.Busy }},
	{"failed", "#e15759", func(h admin.AnswerHour) uint64 { return h.Failed }},
	{"other", "#bab0ac", func(h admin.AnswerHour) uint64 { return h.Other }},
}

// AnswersChart draws, for each local hour of the recipients, the shares of
// the final outcomes (100 % a bar), the answer rate on top.
func AnswersChart(a admin.AnswerRates) string {
	var all, answered uint64
	for _, h := range a.Hours {
		all += h.Total()
		answered += h.Answered
	}
	desc := fmt.Sprintf("%d final results from %s to %s by the recipient's local hour: answered, no answer, busy, failed and other (machine, canceled) as shares of each hour; %d more without the recipient's zone.",
		all, a.Since.UTC().Format("2006-01-02 15:04Z"), a.Until.UTC().Format("2006-01-02 15:04Z"), a.UnknownZone)
	var b strings.Builder
	svgOpen(&b, "chart-answers", answersTitle, desc, fmt.Sprintf(` data-total="%d" data-unknown-zone="%d"`, all, a.UnknownZone))
	scale := func(v float64) float64 { return padT + plotH - v/100*plotH }
	yTicks(&b, []float64{0, 25, 50, 75, 100}, scale, func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) + " %" })
	slot := float64(plotW) / 24
	w := slot * 0.8
	for i, h := range a.Hours {
		x := padL + float64(i)*slot + (slot-w)/2
		total := h.Total()
		rate := ""
		if total > 0 {
			rate = strconv.FormatFloat(math.Round(float64(h.Answered)/float64(total)*1000)/10, 'f', -1, 64)
		}
		fmt.Fprintf(&b, `<g class="hour" data-hour="%d" data-total="%d" data-answer-rate="%s">`, h.Hour, total, rate)
		y := float64(padT + plotH)
		for _, o := range outcomes {
			cnt := o.count(h)
			if cnt == 0 {
				continue
			}
			hgt := float64(cnt) / float64(total) * plotH
			y -= hgt
			fmt.Fprintf(&b, `<rect class="bar" data-hour="%d" data-series="%s" data-count="%d" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%02d:00 local: %d %s of %d</title></rect>`,
				h.Hour, o.name, cnt, num(x), num(y), num(w), num(hgt), o.color, h.Hour, cnt, o.name, total)
		}
		if total > 0 {
			fmt.Fprintf(&b, `<text x="%s" y="%d" text-anchor="middle" font-size="10">%s</text>`, num(x+w/2), padT-5, rate)
		}
		b.WriteString(`</g>`)
		if i%3 == 0 {
			fmt.Fprintf(&b, `<text x="%s" y="%d" text-anchor="middle">%02d:00</text>`, num(x+w/2), padT+plotH+16, i)
		}
	}
	axes(&b, "the recipient's local hour (numbers on top: answered, %)", "share of final results")
	names := make([]string, len(outcomes))
	colors := make([]string, len(outcomes))
	for i, o := range outcomes {
		names[i], colors[i] = strings.ReplaceAll(o.name, "_", " "), o.color
	}
	legend(&b, names, colors)
	b.WriteString(`</svg><figcaption>`)
	if all > 0 {
		fmt.Fprintf(&b, "%d final results, %s %% answered.", all, strconv.FormatFloat(math.Round(float64(answered)/float64(all)*1000)/10, 'f', -1, 64))
	} else {
		b.WriteString("No final results in the last 7 days.")
	}
	if !a.CaughtUp {
		b.WriteString(" Still reading ivr-results: the counts grow until it is read to its end.")
	}
	b.WriteString(`</figcaption></figure>`)
	return b.String()
}

// latenessTicks are the lateness chart's y ticks, in seconds (log scale).
var latenessTicks = []float64{0.001, 0.01, 0.1, 1, 10, 60}

// LatenessChart draws p50 and p99 of the fire lateness per minute on a log
// scale from 1 ms to a minute, a point per minute in which follow-ups
// fired.
func LatenessChart(ms []admin.LatenessMinute) string {
	const lo, hi = 1e-3, 60.0
	scale := func(v float64) float64 {
		v = min(max(v, lo), hi)
		return padT + plotH - (math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotH
	}
	var fired uint64
	for _, m := range ms {
		fired += m.Count
	}
	var b strings.Builder
	desc := fmt.Sprintf("%d follow-ups fired in the last %d minutes; per minute, the median (p50) and the 99th percentile (p99) of how late they fired, from their effective due time to the publishing of their calls, on a log scale.", fired, len(ms))
	svgOpen(&b, "chart-lateness", latenessTitle, desc, fmt.Sprintf(` data-total="%d"`, fired))
	yTicks(&b, latenessTicks, scale, func(v float64) string {
		if v < 1 {
			return strconv.FormatFloat(v*1000, 'f', -1, 64) + " ms"
		}
		return strconv.FormatFloat(v, 'f', -1, 64) + " s"
	})
	n := max(len(ms), 1)
	slot := float64(plotW) / float64(n)
	lines := map[string][]string{}
	for i, m := range ms {
		x := padL + float64(i)*slot + slot/2
		if i%10 == 0 || i == len(ms)-1 {
			fmt.Fprintf(&b, `<text x="%s" y="%d" text-anchor="middle">%s</text>`, num(x), padT+plotH+16, m.Minute.UTC().Format("15:04"))
		}
		if m.Count == 0 {
			continue
		}
		fmt.Fprintf(&b, `<g class="minute" data-minute="%s" data-count="%d" data-p50="%s" data-p99="%s">`,
			m.Minute.UTC().Format(time.RFC3339), m.Count, strconv.FormatFloat(m.P50, 'g', -1, 64), strconv.FormatFloat(m.P99, 'g', -1, 64))
		for _, q := range []struct {
			name, color string
			v           float64
		}{{"p99", "#e15759", m.P99}, {"p50", "#4e79a7", m.P50}} {
			y := scale(q.v)
			lines[q.name] = append(lines[q.name], num(x)+","+num(y))
			fmt.Fprintf(&b, `<circle class="point %s" cx="%s" cy="%s" r="3" fill="%s"><title>%s: %d fired, %s %s</title></circle>`,
				q.name, num(x), num(y), q.color, m.Minute.UTC().Format("15:04Z"), m.Count, q.name, esc(seconds(q.v)))
		}
		b.WriteString(`</g>`)
	}
	for _, q := range []struct{ name, color string }{{"p99", "#e15759"}, {"p50", "#4e79a7"}} {
		if len(lines[q.name]) > 1 {
			fmt.Fprintf(&b, `<polyline class="line %s" points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`, q.name, strings.Join(lines[q.name], " "), q.color)
		}
	}
	axes(&b, "minute (UTC)", "lateness (log scale)")
	legend(&b, []string{"p99", "p50 (median)"}, []string{"#e15759", "#4e79a7"})
	b.WriteString(`</svg><figcaption>`)
	if fired == 0 {
		b.WriteString("Nothing fired in the last hour.")
	} else {
		fmt.Fprintf(&b, "%d fired; the quantiles are bucket bounds, within 25 %%.", fired)
	}
	b.WriteString(`</figcaption></figure>`)
	return b.String()
}

// seconds formats a lateness.
func seconds(v float64) string {
	if v < 1 {
		return strconv.FormatFloat(math.Round(v*1e4)/10, 'f', -1, 64) + " ms"
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) + " s"
}
