package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/gorilla/mux"
	"google.golang.org/protobuf/proto"

	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/webui"
	"github.com/ivrsched/ivrsched/processors/scheduler"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
)

// mountCharts serves the charts' admin API (package admin, charts.go):
// /admin/charts/upcoming and /admin/charts/lateness where this process
// schedules, /admin/charts/capacity where it dials, and
// /admin/charts/answers from the process's own reading of ivr-results,
// which the first request starts.
func mountCharts(r *mux.Router, cfg Config, run *Running, roles []*role) {
	parts := int32(cfg.Kafka.Partitions)
	if run.Scheduler != nil {
		var get func(string) (any, error)
		for _, ro := range roles {
			if ro.name == "scheduler" {
				get = ro.get
			}
		}
		r.HandleFunc("/admin/charts/upcoming", func(w http.ResponseWriter, req *http.Request) {
			q := req.URL.Query()
			from, hours := cfg.now(), webui.ChartHours
			var err error
			if v := q.Get("from"); v != "" {
				if from, err = time.Parse(time.RFC3339Nano, v); err != nil {
					http.Error(w, "from: want an RFC 3339 time", http.StatusBadRequest)
					return
				}
			}
			if v := q.Get("hours"); v != "" {
				if hours, err = strconv.Atoi(v); err != nil || hours < 1 || hours > admin.MaxHours {
					http.Error(w, fmt.Sprintf("hours: want 1 to %d", admin.MaxHours), http.StatusBadRequest)
					return
				}
			}
			h, err := upcomingHours(run.Scheduler.Punctuator().Index, parts, get, from, hours)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			writeJSON(w, http.StatusOK, h)
		})
	}
	if run.Lateness != nil {
		r.HandleFunc("/admin/charts/lateness", func(w http.ResponseWriter, req *http.Request) {
			writeJSON(w, http.StatusOK, run.Lateness.Series())
		})
	}
	if run.Placer != nil {
		r.HandleFunc("/admin/charts/capacity", func(w http.ResponseWriter, req *http.Request) {
			writeJSON(w, http.StatusOK, admin.Capacity{CPS: cfg.CPS, Share: run.Placer.Rate()})
		})
	}
	if run.answers != nil {
		r.HandleFunc("/admin/charts/answers", func(w http.ResponseWriter, req *http.Request) {
			writeJSON(w, http.StatusOK, run.answers.rates())
		})
	}
}

// chartSources feeds the web page's charts: the merged answers of the
// instances for the upcoming calls and the lateness, this process's
// reading of ivr-results for the answer rate.
//
// The instances' answers are kept chartsEvery: a page that refreshes each
// second (waiting for a call run now) does not walk the due indexes and
// read thousands of values each time.
func chartSources(src *webui.Source, cfg Config, client *admin.Client, run *Running) {
	src.UpcomingHours = cached(cfg, func(ctx context.Context) (admin.UpcomingHours, error) {
		return client.UpcomingHours(ctx, cfg.now(), webui.ChartHours)
	})
	src.Lateness = cached(cfg, client.Lateness)
	if run.answers != nil {
		src.Answers = func(context.Context) (admin.AnswerRates, error) { return run.answers.rates(), nil }
	}
}

// chartsEvery is how long the page's charts keep the instances' answers.
const chartsEvery = 10 * time.Second

// cached returns fetch's last answer while it is younger than chartsEvery;
// requests meanwhile wait for the one fetching. An error is not kept.
func cached[T any](cfg Config, fetch func(context.Context) (T, error)) func(context.Context) (T, error) {
	var mu sync.Mutex
	var last T
	var at time.Time
	return func(ctx context.Context) (T, error) {
		mu.Lock()
		defer mu.Unlock()
		if now := cfg.now(); !at.IsZero() && now.Sub(at) < chartsEvery && !now.Before(at) {
			return last, nil
		}
		v, err := fetch(ctx)
		if err != nil {
			return v, err
		}
		last, at = v, cfg.now()
		return v, nil
	}
}

func (c Config) now() time.Time {
	if c.Clock == nil {
		return time.Now()
	}
	return c.Clock.Now()
}

// upcomingBatch is how many follow-ups a walk takes from an index at a
// time (under its lock).
const upcomingBatch = 1000

// upcomingHours counts the follow-ups of the owned due indexes (index(p)
// nil: not owned) per hour from the hour from falls in, for hours hours:
// every follow-up after the mark due before their end and every held one
// (those due before from, not fired yet, in the first hour), at most
// admin.MaxScan, by campaign, read from the user's value (get) for at most
// admin.MaxValueReads users (the others count as admin.Unread). The
// parked follow-ups are counted apart (admin.UpcomingHours.Parked). An
// error is an index's (its store could not be read): no partial counts.
func upcomingHours(index func(int32) *dueindex.Index, parts int32, get func(string) (any, error), from time.Time, hours int) (admin.UpcomingHours, error) {
	counter := admin.NewHourCounter(from, hours)
	end := counter.End().UnixNano()
	out := admin.UpcomingHours{Partitions: []int32{}}
	scanned, reads := 0, 0
	for p := int32(0); p < parts; p++ {
		x := index(p)
		if x == nil {
			continue
		}
		out.Partitions = append(out.Partitions, p)
		after := dueindex.Pos{}
		campaigns := map[string]string{} // user+task → campaign, of the users read in this partition
		count := func(pos dueindex.Pos) {
			scanned++
			key := pos.User + "\x00" + pos.Task
			c, ok := campaigns[key]
			if !ok {
				c = admin.Unread
				if get != nil && reads < admin.MaxValueReads {
					reads++
					readCampaigns(get, pos.User, campaigns)
					if v, found := campaigns[key]; found {
						c = v
					}
				}
			}
			counter.Count(pos.Time(), c, 1)
		}
	walk:
		for {
			batch, err := x.Upcoming(after, upcomingBatch)
			if err != nil {
				return admin.UpcomingHours{}, fmt.Errorf("partition %d: %w", p, err)
			}
			if len(batch) == 0 {
				break
			}
			for _, pos := range batch {
				after = pos
				if pos.Due >= end {
					break walk
				}
				if scanned == admin.MaxScan {
					out.Truncated = true
					break walk
				}
				count(pos)
			}
		}
		held, parked := x.Aside(end, admin.MaxScan-scanned)
		for _, pos := range held {
			count(pos)
		}
		out.Held += len(held)
		out.Parked += parked
	}
	out.Start, out.Hours = counter.Hours()
	return out, nil
}

// readCampaigns adds the campaigns of the user's pending follow-ups to
// into, keyed by user and task.
func readCampaigns(get func(string) (any, error), user string, into map[string]string) {
	v, err := get(user)
	if err != nil {
		return
	}
	st, ok := v.(*pb.UserState)
	if !ok {
		return
	}
	for _, t := range st.GetPending() {
		into[user+"\x00"+t.GetTaskId()] = t.GetAction().GetCampaignId()
	}
}

// answersCatchUp bounds what the reading of ivr-results reads back from
// the end of each partition when it starts: the last 7 days, or this many
// records if they are more (AnswerRates.Since then says less).
const answersCatchUp = 500_000

// answersFeed reads ivr-results into an admin.AnswerCounter: from 7 days
// back (at most answersCatchUp records a partition) to the end, then what
// comes. It starts at the first request, so a process nobody asks pays
// nothing; it runs until the process ends, reconnecting after an error.
type answersFeed struct {
	ctx     context.Context
	cfg     Config
	log     *slog.Logger
	counter admin.AnswerCounter

	once     sync.Once
	mu       sync.Mutex
	caughtUp bool
	since    time.Time // the oldest result read, if the catch-up was bounded
}

func newAnswersFeed(ctx context.Context, cfg Config, log *slog.Logger) *answersFeed {
	return &answersFeed{ctx: ctx, cfg: cfg, log: log}
}

// rates starts the reading if it has not, and returns the counts so far.
func (f *answersFeed) rates() admin.AnswerRates {
	f.once.Do(func() { go f.run() })
	out := f.counter.Rates(f.cfg.now())
	f.mu.Lock()
	out.CaughtUp = f.caughtUp
	if f.since.After(out.Since) {
		out.Since = f.since
	}
	f.mu.Unlock()
	return out
}

// run reads until the process ends, starting again a second after an
// error (from where it was).
func (f *answersFeed) run() {
	clk := f.cfg.Clock
	if clk == nil {
		clk = clock.Real{}
	}
	next := map[int32]int64{}
	for {
		err := f.read(next)
		if f.ctx.Err() != nil {
			return
		}
		f.log.Warn("reading ivr-results for the answer rate chart", "err", err)
		select {
		case <-clk.After(time.Second):
		case <-f.ctx.Done():
			return
		}
	}
}

// read consumes every partition of the results topic from next (a
// partition not in it: 7 days back) until the context ends or an error;
// next is kept up to date.
func (f *answersFeed) read(next map[int32]int64) error {
	client, err := f.cfg.Kafka.Connect(f.ctx)
	if err != nil {
		return err
	}
	defer client.Close()
	topic := string(f.cfg.Topics.Results)
	parts, err := client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("partitions of %s: %w", topic, err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer consumer.Close()
	type pc struct {
		p   int32
		end int64
		c   sarama.PartitionConsumer
	}
	var pcs []pc
	defer func() {
		for _, c := range pcs {
			c.c.Close()
		}
	}()
	week := f.cfg.now().Add(-admin.AnswerDays * 24 * time.Hour)
	bounded := false
	for _, p := range parts {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return fmt.Errorf("end of %s/%d: %w", topic, p, err)
		}
		from, ok := next[p]
		if !ok {
			if from, err = client.GetOffset(topic, p, week.UnixMilli()); err != nil {
				return fmt.Errorf("offset of %s/%d at %v: %w", topic, p, week, err)
			}
			if from < 0 { // nothing since
				from = end
			}
			if end-from > answersCatchUp {
				from, bounded = end-answersCatchUp, true
			}
		}
		c, err := consumer.ConsumePartition(topic, p, from)
		if err != nil {
			return fmt.Errorf("consume %s/%d: %w", topic, p, err)
		}
		pcs = append(pcs, pc{p, end, c})
		next[p] = from
	}
	// One goroutine a partition; the first error ends them all, and they
	// have ended when read returns (next is the caller's again).
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	errs := make(chan error, len(pcs))
	caught := make(chan struct{}, len(pcs))
	var mu sync.Mutex // next
	var oldest time.Time
	for _, c := range pcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := false
			mark := func() {
				if !done {
					done = true
					caught <- struct{}{}
				}
			}
			mu.Lock()
			if next[c.p] >= c.end {
				mark()
			}
			mu.Unlock()
			for {
				select {
				case m := <-c.c.Messages():
					res := new(pb.CallResult)
					if proto.Unmarshal(m.Value, res) == nil && f.counter.Add(res, f.cfg.now()) && bounded {
						f.mu.Lock()
						if at := res.GetAt().AsTime(); oldest.IsZero() || at.Before(oldest) {
							oldest = at
						}
						f.mu.Unlock()
					}
					mu.Lock()
					next[c.p] = m.Offset + 1
					mu.Unlock()
					if m.Offset+1 >= c.end {
						mark()
					}
				case err := <-c.c.Errors():
					errs <- fmt.Errorf("consume %s/%d: %w", topic, c.p, err)
					return
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
			}
		}()
	}
	for range pcs {
		select {
		case <-caught:
		case err := <-errs:
			return err
		}
	}
	f.mu.Lock()
	f.caughtUp = true
	if bounded {
		f.since = oldest
	}
	f.mu.Unlock()
	select {
	case err := <-errs:
		return err
	case <-f.ctx.Done(): // also with no partition to read
		return f.ctx.Err()
	}
}

// latenessObservers observe the scheduler's fire lateness into the
// Prometheus histogram and the charts' per-minute series, which takes the
// fire's clock reading (scheduler.TimedObserver).
type latenessObservers struct {
	histogram scheduler.Observer
	series    *admin.LatenessRecorder
}

func (o latenessObservers) Observe(v float64) {
	o.histogram.Observe(v)
	o.series.Observe(v)
}

func (o latenessObservers) ObserveAt(v float64, at time.Time) {
	o.histogram.Observe(v)
	o.series.ObserveAt(v, at)
}
