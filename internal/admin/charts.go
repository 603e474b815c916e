package admin

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"time"
)

// The charts of the web page ("the day at a glance") and their admin API:
//
//   - /admin/charts/upcoming: each scheduler instance counts the follow-ups
//     of its due indexes per hour and campaign (UpcomingHours);
//   - /admin/charts/capacity: each dialer instance says the deployment's
//     --cps (Capacity);
//   - /admin/charts/lateness: each scheduler instance's fire lateness per
//     minute over the last hour, as bucket counts (LatenessSeries);
//   - /admin/charts/answers: the final results of the last 7 days by the
//     recipient's local hour, from the instance's own reading of
//     ivr-results (AnswerRates).
//
// Client.UpcomingHours and Client.Lateness merge the instances' answers.

// Chart bounds: what a request may ask and what an answer holds.
const (
	// MaxHours is the most hours /admin/charts/upcoming counts.
	MaxHours = 7 * 24
	// MaxCampaigns is the most campaigns an hour lists by name; the others
	// are counted under OtherCampaigns. Campaign ids come from producers:
	// their number is not ours to bound.
	MaxCampaigns = 8
	// NoCampaign names follow-ups without a campaign, OtherCampaigns those
	// of campaigns beyond MaxCampaigns, and Unread those whose user value
	// was not read (beyond MaxValueReads, or unreadable).
	NoCampaign     = "(none)"
	OtherCampaigns = "(other)"
	Unread         = "(not read)"
	// MaxValueReads is the most user values an instance reads for one
	// /admin/charts/upcoming (campaigns live in the values, not in the due
	// index); MaxScan the most follow-ups it counts.
	MaxValueReads = 50_000
	MaxScan       = 2_000_000
)

// HourCount is the follow-ups due in one hour: in all, and by campaign.
type HourCount struct {
	Start     time.Time      `json:"start"`
	Total     int            `json:"total"`
	Campaigns map[string]int `json:"campaigns"`
}

// UpcomingHours is the answer of /admin/charts/upcoming: the follow-ups
// of the instance's due indexes (at their effective time, after the
// calling policy) counted per hour from Start, the hour the request's
// from falls in; those due before Start (due now, not fired yet) count
// in the first hour. Client.UpcomingHours merges the instances' answers
// and adds the dialers' capacity.
type UpcomingHours struct {
	Partitions []int32     `json:"partitions"`
	Start      time.Time   `json:"start"`
	Hours      []HourCount `json:"hours"`
	// Truncated: more than MaxScan follow-ups were in the range; the hours
	// after the last one counted are short.
	Truncated bool `json:"truncated,omitempty"`
	// Held is how many of the follow-ups counted in Hours are held: the
	// fired mark passed them on a clock ahead of the scheduler's, and a
	// wake fires each at its due time. Parked is the follow-ups due and
	// not fired that wait for their users' callbacks to move them under
	// the calling policy in force (changed, or a campaign paused); their
	// new times are not known yet, so they count in no hour.
	Held   int `json:"held"`
	Parked int `json:"parked"`
	// CPS is the deployment's calls per second (--cps; 0: no limit) as
	// the dialers said (Dialers answered), PerHour the calls an hour
	// they place at most (CPS × 3600). Set by the client.
	CPS     float64 `json:"cps"`
	PerHour float64 `json:"calls_per_hour"`
	Dialers int     `json:"dialers"`
	// Missing are the scheduler's partitions no instance answered for.
	Missing []int32 `json:"missing,omitempty"`
}

// Capacity is the answer of /admin/charts/capacity: the deployment's calls
// per second the dialer instance was given (--cps, 0: no limit) and its
// share now (--cps × owned partitions / partitions).
type Capacity struct {
	CPS   float64 `json:"cps"`
	Share float64 `json:"share"`
}

// HourCounter counts follow-ups into hours from a start (Count), naming
// at most MaxCampaigns campaigns an hour.
type HourCounter struct {
	start time.Time
	hours []HourCount
}

// NewHourCounter counts hours hours from the hour from falls in (UTC).
func NewHourCounter(from time.Time, hours int) *HourCounter {
	start := from.UTC().Truncate(time.Hour)
	c := &HourCounter{start: start, hours: make([]HourCount, hours)}
	for i := range c.hours {
		c.hours[i] = HourCount{Start: start.Add(time.Duration(i) * time.Hour), Campaigns: map[string]int{}}
	}
	return c
}

// End is the end of the last hour.
func (c *HourCounter) End() time.Time { return c.start.Add(time.Duration(len(c.hours)) * time.Hour) }

// Count counts n follow-ups of campaign due at due: one due before the
// start counts in the first hour, one at or after End is not counted
// (false).
func (c *HourCounter) Count(due time.Time, campaign string, n int) bool {
	i := 0
	if due.After(c.start) {
		i = int(due.Sub(c.start) / time.Hour)
	}
	if i >= len(c.hours) {
		return false
	}
	h := &c.hours[i]
	h.Total += n
	if campaign == "" {
		campaign = NoCampaign
	}
	if _, ok := h.Campaigns[campaign]; !ok && len(h.Campaigns) >= MaxCampaigns {
		campaign = OtherCampaigns
	}
	h.Campaigns[campaign] += n
	return true
}

// Hours returns the counts, the first hour's start and the hours.
func (c *HourCounter) Hours() (time.Time, []HourCount) { return c.start, c.hours }

// MergeHours adds the hours of b (from the same start) into a, keeping at
// most MaxCampaigns campaigns an hour by name: the largest across the
// merged hours; the others go to OtherCampaigns.
func MergeHours(a, b []HourCount) []HourCount {
	for i := range b {
		if i >= len(a) {
			a = append(a, HourCount{Start: b[i].Start, Campaigns: map[string]int{}})
		}
		a[i].Total += b[i].Total
		if a[i].Campaigns == nil {
			a[i].Campaigns = map[string]int{}
		}
		for c, n := range b[i].Campaigns {
			a[i].Campaigns[c] += n
		}
	}
	return limitCampaigns(a)
}

// limitCampaigns keeps by name the MaxCampaigns campaigns with the most
// follow-ups over all hours (and always NoCampaign, Unread and
// OtherCampaigns), and counts the rest under OtherCampaigns.
func limitCampaigns(hours []HourCount) []HourCount {
	special := map[string]bool{NoCampaign: true, Unread: true, OtherCampaigns: true}
	var named []string
	for _, c := range Campaigns(hours) {
		if !special[c] {
			named = append(named, c)
		}
	}
	if len(named) <= MaxCampaigns {
		return hours
	}
	for _, c := range named[MaxCampaigns:] {
		for _, h := range hours {
			if n, ok := h.Campaigns[c]; ok {
				h.Campaigns[OtherCampaigns] += n
				delete(h.Campaigns, c)
			}
		}
	}
	return hours
}

// Campaigns lists the campaigns of hours, most follow-ups first (then by
// name).
func Campaigns(hours []HourCount) []string {
	total := map[string]int{}
	for _, h := range hours {
		for c, n := range h.Campaigns {
			total[c] += n
		}
	}
	out := make([]string, 0, len(total))
	for c := range total {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(total[b], total[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return out
}

// Backlog is what an hour leaves for the next one when the dialer places
// at most perHour calls an hour: the calls due so far and not placed
// (perHour 0: no limit, none). The first hour starts with none.
func Backlog(totals []int, perHour float64) []float64 {
	out := make([]float64, len(totals))
	left := 0.0
	for i, n := range totals {
		if perHour > 0 {
			left = max(0, left+float64(n)-perHour)
		}
		out[i] = left
	}
	return out
}

// UpcomingHours asks every scheduler instance for its follow-ups per hour
// from the hour from falls in, for hours hours (1 to MaxHours), merges
// them, and asks the dialer instances for the deployment's --cps.
func (c *Client) UpcomingHours(ctx context.Context, from time.Time, hours int) (UpcomingHours, error) {
	if hours < 1 || hours > MaxHours {
		return UpcomingHours{}, fmt.Errorf("hours: %d; want 1 to %d", hours, MaxHours)
	}
	start, empty := NewHourCounter(from, hours).Hours()
	out := UpcomingHours{Start: start, Hours: empty, Partitions: []int32{}}
	cl, err := c.Discover(ctx, string(c.Topics.Scheduler), string(c.Topics.Onboarding))
	if err != nil {
		return out, err
	}
	out.Missing = cl.Missing
	q := url.Values{"from": {from.UTC().Format(time.RFC3339Nano)}, "hours": {strconv.Itoa(hours)}}
	for _, in := range cl.Instances {
		var page UpcomingHours
		if err := c.get(ctx, in.URL, []string{"admin", "charts", "upcoming"}, q, &page); err != nil {
			return out, err
		}
		if !page.Start.Equal(out.Start) || len(page.Hours) > hours {
			return out, fmt.Errorf("admin API %s: hours from %v, want from %v", in.URL, page.Start, out.Start)
		}
		out.Hours = MergeHours(out.Hours, page.Hours)
		out.Partitions = append(out.Partitions, page.Partitions...)
		out.Truncated = out.Truncated || page.Truncated
		out.Held += page.Held
		out.Parked += page.Parked
	}
	slices.Sort(out.Partitions)
	dl, err := c.Discover(ctx, string(c.Topics.Dialer), string(c.Topics.Calls))
	if err != nil {
		return out, err
	}
	for _, in := range dl.Instances {
		var capa Capacity
		if err := c.get(ctx, in.URL, []string{"admin", "charts", "capacity"}, nil, &capa); err != nil {
			return out, err
		}
		// The instances are given the same --cps; should they differ (a
		// rolling change), the larger is what the deployment moves to.
		out.CPS = max(out.CPS, capa.CPS)
		out.Dialers++
	}
	out.PerHour = out.CPS * 3600
	return out, nil
}

// LatenessBounds are the upper bounds, in seconds, of the buckets of the
// per-minute lateness series: 0.1 ms to about 2 minutes, each 25 % above
// the one before (a quantile read from them is within 25 %), and a last
// bucket for anything above.
var LatenessBounds = func() []float64 {
	var b []float64
	for v := 1e-4; v < 120; v *= 1.25 {
		b = append(b, math.Round(v*1e6)/1e6)
	}
	return append(b, math.Inf(1))
}()

// LatenessMinute is one minute of the lateness series: how many follow-ups
// fired in it, their lateness quantiles in seconds (0 when none fired),
// and, in an instance's answer, the counts per LatenessBounds bucket.
type LatenessMinute struct {
	Minute  time.Time `json:"minute"`
	Count   uint64    `json:"count"`
	P50     float64   `json:"p50"`
	P99     float64   `json:"p99"`
	Buckets []uint64  `json:"buckets,omitempty"`
}

// LatenessSeries is the answer of /admin/charts/lateness: the fire
// lateness of the instance's scheduler per minute over the last hour,
// oldest first, one entry a minute (the current one last).
type LatenessSeries struct {
	Bounds  []float64        `json:"-"`
	Minutes []LatenessMinute `json:"minutes"`
}

// Quantile is the q-quantile (0 < q ≤ 1) of the bucket counts over
// LatenessBounds: the upper bound of the bucket it falls in (the last
// finite bound for the open bucket); 0 with no counts.
func Quantile(buckets []uint64, q float64) float64 {
	var total uint64
	for _, n := range buckets {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, n := range buckets {
		seen += n
		if seen >= rank && i < len(LatenessBounds) {
			if math.IsInf(LatenessBounds[i], 1) {
				return LatenessBounds[i-1]
			}
			return LatenessBounds[i]
		}
	}
	return LatenessBounds[len(LatenessBounds)-2]
}

// Summarize sets each minute's Count, P50 and P99 from its buckets.
func Summarize(ms []LatenessMinute) {
	for i := range ms {
		var n uint64
		for _, b := range ms[i].Buckets {
			n += b
		}
		ms[i].Count, ms[i].P50, ms[i].P99 = n, Quantile(ms[i].Buckets, 0.5), Quantile(ms[i].Buckets, 0.99)
	}
}

// Lateness asks every scheduler instance for its lateness series, adds
// the instances' buckets minute by minute, and returns the merged minutes
// (oldest first) with their quantiles, without the buckets.
func (c *Client) Lateness(ctx context.Context) ([]LatenessMinute, error) {
	cl, err := c.Discover(ctx, string(c.Topics.Scheduler), string(c.Topics.Onboarding))
	if err != nil {
		return nil, err
	}
	var series [][]LatenessMinute
	for _, in := range cl.Instances {
		var s LatenessSeries
		if err := c.get(ctx, in.URL, []string{"admin", "charts", "lateness"}, nil, &s); err != nil {
			return nil, err
		}
		series = append(series, s.Minutes)
	}
	return MergeLateness(series...), nil
}

// MergeLateness adds the series' buckets minute by minute (at most 60
// minutes, the latest) and summarizes them, without the buckets.
func MergeLateness(series ...[]LatenessMinute) []LatenessMinute {
	by := map[int64]*LatenessMinute{}
	for _, s := range series {
		for _, m := range s {
			k := m.Minute.Unix()
			if by[k] == nil {
				by[k] = &LatenessMinute{Minute: m.Minute.UTC(), Buckets: make([]uint64, len(LatenessBounds))}
			}
			for i, n := range m.Buckets {
				if i < len(LatenessBounds) {
					by[k].Buckets[i] += n
				}
			}
		}
	}
	out := make([]LatenessMinute, 0, len(by))
	for _, m := range by {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b LatenessMinute) int { return a.Minute.Compare(b.Minute) })
	if len(out) > 60 {
		out = out[len(out)-60:]
	}
	Summarize(out)
	for i := range out {
		out[i].Buckets = nil
	}
	return out
}

// AnswerHour is the final results of one local hour of the recipients.
type AnswerHour struct {
	Hour     int    `json:"hour"`
	Answered uint64 `json:"answered"`
	NoAnswer uint64 `json:"no_answer"`
	Busy     uint64 `json:"busy"`
	Failed   uint64 `json:"failed"`
	// Other is machine and canceled.
	Other uint64 `json:"other"`
}

// Total is the hour's final results.
func (h AnswerHour) Total() uint64 { return h.Answered + h.NoAnswer + h.Busy + h.Failed + h.Other }

// AnswerRates is the answer of /admin/charts/answers: the final results
// published on ivr-results from Since to Until (at most the last 7 days,
// by their time), by the recipient's local hour (24 entries); results
// without the recipient's zone (published before the dialer recorded it,
// or of a number without one zone) count in UnknownZone only. CaughtUp
// says the instance has read ivr-results to its end once since it
// started reading (at the first request).
type AnswerRates struct {
	Since       time.Time    `json:"since"`
	Until       time.Time    `json:"until"`
	Hours       []AnswerHour `json:"hours"`
	UnknownZone uint64       `json:"unknown_zone"`
	CaughtUp    bool         `json:"caught_up"`
}
