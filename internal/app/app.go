// Package app assembles ivrsched's roles (scheduler, dialer, web UI, the
// embedded broker) from one configuration, for the ivrsched binary and for
// end-to-end tests.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/storage"
	"github.com/lovoo/goka/web/index"
	"github.com/lovoo/goka/web/monitor"
	"github.com/lovoo/goka/web/query"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/app/metrics"
	"github.com/ivrsched/ivrsched/internal/clock"
	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/internal/localstore"
	"github.com/ivrsched/ivrsched/internal/policy"
	"github.com/ivrsched/ivrsched/internal/providers/provider"
	"github.com/ivrsched/ivrsched/internal/providers/twilio"
	"github.com/ivrsched/ivrsched/internal/providers/webhook"
	"github.com/ivrsched/ivrsched/internal/redact"
	"github.com/ivrsched/ivrsched/internal/suppress"
	"github.com/ivrsched/ivrsched/internal/webui"
	"github.com/ivrsched/ivrsched/processors/dialer"
	"github.com/ivrsched/ivrsched/processors/dialer/placement"
	"github.com/ivrsched/ivrsched/processors/scheduler"
	"github.com/ivrsched/ivrsched/processors/scheduler/dueindex"
	"github.com/ivrsched/ivrsched/topology"
)

// Config is what the roles need.
type Config struct {
	Kafka  kafkaclient.Kafka
	Topics topology.Topics
	// DataDir holds each role's local table stores (LevelDB), one folder per
	// role. A store holds only what the changelog acknowledged, so after a
	// crash only the changelog written since is restored.
	DataDir string
	// The web servers by purpose, each a listen address (empty: none);
	// purposes given the same address share one server.
	//
	// HTTP serves the probes and the metrics: /healthz, /readyz, /metrics.
	HTTP string
	// AdminHTTP serves the admin API (/admin/), ivrsched's page (/ui/), the
	// calling policy (/policy) and Goka's monitor and query pages, only to
	// requests that carry AdminToken. Without a token (a loopback address
	// only) it serves them with phone numbers masked and no actions.
	AdminHTTP string
	// CallbackHTTP serves only the providers' status callbacks
	// (/callbacks/), for the public side of a proxy.
	CallbackHTTP string
	// PprofHTTP serves /debug/pprof/, on a loopback address only.
	PprofHTTP string
	// AdminURL is the address of this process's admin listener that its
	// consumer group members announce to the CLI (package admin); empty:
	// http://<AdminHTTP>, an unspecified host replaced by the host name.
	AdminURL string
	// AdminToken guards AdminHTTP, reads included, and the web page's
	// actions; empty: the page's actions are off.
	AdminToken string
	// AdminPeers are the networks in which the web page fetches the
	// instances' announced URLs; nil: admin.DefaultPeers of the brokers.
	AdminPeers *admin.Peers

	Default scheduler.DefaultFollowUp
	Limits  scheduler.Limits
	// TickGap is the scheduler's shortest time between two ticks of a partition.
	TickGap time.Duration
	// Retain is how long the scheduler keeps a user with nothing pending
	// (scheduler.Config.Retain); 0 keeps every user.
	Retain time.Duration
	// DefaultPolicy is the calling policy in force while the ivr-policies
	// topic holds none (`ivrsched policy set` writes one); nil: no policy,
	// every follow-up fires at its requested time. The CLI's default is
	// policy.Default() (08:00 to 21:00 local time, every day).
	DefaultPolicy *policy.Policy
	// SuppressionKey is the deployment's secret for the keyed hash of
	// numbers on the do-not-call list (internal/suppress); the scheduler
	// and the dialer refuse to start without one.
	SuppressionKey suppress.Key

	// The dialer's provider (provider.Log if nil) and how it is called:
	// one request's timeout, one call's deadline (retries included), calls
	// at a time in this process, calls per second of the deployment (0: no
	// limit).
	Provider     provider.Provider
	CallTimeout  time.Duration
	CallDeadline time.Duration
	MaxInFlight  int
	CPS          float64
	// The status callback endpoints the dialer serves on HTTP, if any; Run
	// sets their sink.
	TwilioCallback  *twilio.Callback
	WebhookCallback *webhook.Callback
	// Warnings are what the configuration allows but an operator should
	// fix (a webhook without a secret): logged at start and listed in
	// /readyz's answer, with Kafka.Security's (Security.Warnings).
	Warnings []string

	Clock  clock.Clock
	Logger *slog.Logger
	// Metrics is the registry the roles' metrics go to, served on HTTP's
	// /metrics; nil: a registry of Run's own.
	Metrics *prometheus.Registry

	// wrapSchedulerStorage, set by tests, wraps the scheduler's storage
	// builder (fault injection).
	wrapSchedulerStorage func(storage.Builder) storage.Builder
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if err := c.Kafka.Validate(); err != nil {
		return err
	}
	if c.DataDir == "" {
		return fmt.Errorf("%w: no data directory", kafkaclient.ErrConfig)
	}
	if (c.TwilioCallback != nil || c.WebhookCallback != nil) && c.CallbackHTTP == "" {
		return fmt.Errorf("%w: status callbacks need their listener's address", kafkaclient.ErrConfig)
	}
	if c.CallbackHTTP != "" && (c.CallbackHTTP == c.AdminHTTP || c.CallbackHTTP == c.PprofHTTP) {
		return fmt.Errorf("%w: the status callbacks' listener %s is public: it cannot serve the admin listener or pprof too", kafkaclient.ErrConfig, c.CallbackHTTP)
	}
	if c.PprofHTTP != "" && !IsLoopback(c.PprofHTTP) {
		return fmt.Errorf("%w: pprof's address %s is not a loopback address", kafkaclient.ErrConfig, c.PprofHTTP)
	}
	if c.AdminToken != "" && len(c.AdminToken) < admin.MinTokenLength {
		return fmt.Errorf("%w: the admin token has %d characters; want %d or more", kafkaclient.ErrConfig, len(c.AdminToken), admin.MinTokenLength)
	}
	if c.AdminHTTP != "" && c.AdminToken == "" && !IsLoopback(c.AdminHTTP) {
		return fmt.Errorf("%w: the admin listener %s is not on a loopback address and has no admin token", kafkaclient.ErrConfig, c.AdminHTTP)
	}
	return nil
}

func (c Config) schedulerStorage(b storage.Builder) storage.Builder {
	if c.wrapSchedulerStorage != nil {
		return c.wrapSchedulerStorage(b)
	}
	return b
}

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

// Roles selects what Run runs.
type Roles struct{ Scheduler, Dialer bool }

// Running is what Run started, for tests and the web UI.
type Running struct {
	Scheduler *scheduler.Scheduler
	Dialer    *dialer.Dialer
	Placer    *placement.Placer
	// Policy is the calling policy the scheduler and the dialer apply.
	Policy func() *policy.Policy
	// Lateness is the scheduler's fire lateness per minute (the charts).
	Lateness *admin.LatenessRecorder
	answers  *answersFeed // the answer rate chart's reading of ivr-results
	ready    chan struct{}
	roles    []*role
}

// Ready is closed once every role's processor has recovered its table and
// runs, the first time.
func (r *Running) Ready() <-chan struct{} { return r.ready }

// Readiness is whether every role is ready now (what /readyz answers).
func (r *Running) Readiness() Readiness { return readiness(r.roles) }

// Run creates the topics and runs the selected roles until ctx ends. A role
// whose processor fails (a lost broker, say) is rebuilt and restarted with
// backoff; Run itself returns only when ctx ends or setup fails. started, if
// not nil, receives what was started.
func Run(ctx context.Context, cfg Config, roles Roles, started func(*Running)) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if roles.Scheduler || roles.Dialer {
		// Both read the do-not-call list, which they cannot look up without it.
		switch {
		case len(cfg.SuppressionKey) == 0:
			return fmt.Errorf("%w: %w", kafkaclient.ErrConfig, suppress.ErrNoKey)
		case len(cfg.SuppressionKey) < suppress.MinKeyBytes:
			return fmt.Errorf("%w: the suppression key is %d bytes long; at least %d are required", kafkaclient.ErrConfig, len(cfg.SuppressionKey), suppress.MinKeyBytes)
		}
	}
	log := cfg.logger()
	cfg.Warnings = append(slices.Clip(cfg.Warnings), cfg.Kafka.Security.Warnings()...)
	for _, w := range cfg.Warnings {
		log.Warn(w)
	}
	if cfg.AdminHTTP != "" {
		cfg.Kafka.MemberData = admin.Announcement{URL: announceURL(cfg)}.Encode()
	}
	if err := topology.EnsureTopics(ctx, cfg.Kafka, cfg.Topics.Specs()); err != nil {
		return fmt.Errorf("topics: %w", err)
	}
	opts := append(cfg.Kafka.ProcessorOptions(), goka.WithLogger(gokaLogger{log}))
	g, ctx := errgroup.WithContext(ctx)
	run := &Running{ready: make(chan struct{})}
	reg := cfg.registry()
	router, callbacks := mux.NewRouter(), mux.NewRouter() // the admin listener's, the status callbacks'
	mon := monitor.NewServer("/monitor", router)
	var settled func(*pb.UserState) *pb.UserState // set when this process schedules
	qry := query.NewServer("/query", router, query.WithHumanizer(query.HumanizerFunc(func(v any) (string, error) {
		if st, ok := v.(*pb.UserState); ok && settled != nil {
			v = settled(st)
		}
		if m, ok := v.(proto.Message); ok && cfg.AdminToken == "" { // no request carries a token
			v = redact.Phones(m)
		}
		return humanize(v)
	})))
	var all []*role

	var pv *policyView
	var sv *suppressionView
	var gate <-chan struct{} // the policy and the do-not-call list have been read
	var list *suppress.List
	if roles.Scheduler || roles.Dialer { // the dialer reads its retry rules
		var err error
		if pv, err = newPolicyView(cfg, log.With("role", "policy")); err != nil {
			return err
		}
		g.Go(func() error { return pv.Run(ctx) })
		run.Policy = pv.Current
		if sv, err = newSuppressionView(cfg, log.With("role", "suppressions")); err != nil {
			return err
		}
		g.Go(func() error { return sv.Run(ctx) })
		list = sv.list(cfg, pv)
		gate = both(pv.Ready(), sv.Ready())
		// No follow-up is placed, and no outcome judged, under the default
		// while a policy is set: the roles' processors take no input before
		// the view has read the policy topic (their gate), but they join
		// their groups and restore their partitions meanwhile.
		g.Go(func() error {
			select {
			case <-pv.Ready():
				log.Info("calling policy in force", "version", version(pv.Current()))
			case <-ctx.Done():
			}
			return nil
		})
	}
	if roles.Scheduler {
		em, err := kafkaclient.NewRevivingEmitter("ticks", cfg.Clock, log,
			kafkaclient.GokaEmitter(cfg.Kafka.Brokers, cfg.Topics.Ticks, new(codec.Tick), cfg.Kafka.EmitterOptions()...))
		if err != nil {
			return fmt.Errorf("tick emitter: %w", err)
		}
		stores := newStores(ctx, cfg, "scheduler", log)
		// The stores keep the due order beside the values: the due index
		// holds a window of it (processors/scheduler/dueindex/disk.go).
		stores.Index(dueindex.EntriesVersion, dueindex.Entries(scheduler.ParseValue))
		lateness := metrics.FireLateness()
		run.Lateness = admin.NewLatenessRecorder(cfg.Clock)
		s, err := scheduler.New(scheduler.Config{
			Topics:        cfg.Topics,
			Storage:       cfg.schedulerStorage(stores.Builder()),
			Clock:         cfg.Clock,
			Default:       cfg.Default,
			Limits:        cfg.Limits,
			MaxValueBytes: kafkaclient.ValueBound(cfg.Kafka.Sarama()),
			Partitions:    int32(cfg.Kafka.Partitions),
			TickGap:       cfg.TickGap,
			Retain:        cfg.Retain,
			Policy:        pv.Current,
			Lateness:      latenessObservers{lateness, run.Lateness},
			Suppressions:  list,
			Logger:        log.With("role", "scheduler"),
		}, scheduler.TickSender(em, int32(cfg.Kafka.Partitions), cfg.Clock, log))
		if err != nil {
			return err
		}
		if err := register(reg, lateness, metrics.Scheduler(s)); err != nil {
			return err
		}
		run.Scheduler = s
		settled = s.Settled
		sr := newRole("scheduler", string(cfg.Topics.SchedulerTable()), log, cfg.Clock, func(extra ...goka.ProcessorOption) (*goka.Processor, error) {
			return s.Processor(cfg.Kafka.Brokers, append(withStores(opts, stores, cfg.Kafka), extra...)...)
		})
		// A rebalance takes back the due indexes of the partitions that stay
		// here when the session ended cleanly (processors/scheduler/dueindex/kept.go).
		sr.sessionEnded = s.Punctuator().SessionEnded
		sr.gate = gate
		all = append(all, sr.supervised(cfg.Kafka, cfg.Topics.Scheduler))
		all[len(all)-1].indexed = indexBuilt(s)
		all[len(all)-1].stores = stores
		g.Go(func() error { return s.Punctuator().Run(ctx) })
		g.Go(func() error {
			<-ctx.Done()
			return em.Finish()
		})
	}
	if roles.Dialer {
		d, pl, r, err := startDialer(ctx, g, cfg, opts, callbacks, reg, pv.Current, list, gate, log)
		if err != nil {
			return err
		}
		run.Dialer, run.Placer = d, pl
		all = append(all, r)
	}
	run.roles = all
	if err := register(reg, metrics.Restores(restoreProgress(all))); err != nil {
		return err
	}
	for _, r := range all {
		first, err := r.build()
		if err != nil {
			return err
		}
		mon.AttachProcessor(first)
		if err := qry.AttachSource(r.table, r.get); err != nil {
			return err
		}
		g.Go(func() error { return r.supervise(ctx, first) })
	}
	g.Go(func() error {
		for _, r := range all {
			select {
			case <-r.ready:
			case <-ctx.Done():
				return nil
			}
		}
		close(run.ready)
		log.Info("ready", "roles", len(all))
		return nil
	})
	var ls listeners
	if cfg.HTTP != "" {
		probes := mux.NewRouter()
		mountHealth(probes, all, cfg.Warnings)
		mountMetrics(probes, reg)
		ls.add(cfg.HTTP, "probes and metrics", probes, "/healthz", "/readyz", "/metrics")
	}
	if cfg.AdminHTTP != "" {
		attempts := &admin.Attempts{Clock: cfg.Clock} // of the listener's token and the page's
		run.answers = newAnswersFeed(ctx, cfg, log.With("role", "charts"))
		mountAdmin(router, cfg, run, all)
		mountSuppressions(router, cfg, attempts)
		mountCharts(router, cfg, run, all)
		mountUI(router, cfg, run, attempts)
		if run.Policy != nil {
			router.HandleFunc("/policy", policyPage(run.Policy))
		}
		idx := index.NewServer("/", router)
		idx.AddComponent(mon, "Monitor")
		idx.AddComponent(qry, "Query")
		h := webui.GokaPages(router)
		if cfg.AdminToken != "" {
			h = admin.RequireToken(cfg.AdminToken, attempts, h)
		}
		ls.add(cfg.AdminHTTP, "admin", h)
	}
	ls.add(cfg.CallbackHTTP, "status callbacks", callbacks, "/callbacks/")
	ls.add(cfg.PprofHTTP, "pprof", pprofHandler(), "/debug/pprof/")
	if err := ls.serve(ctx, g, log); err != nil {
		return err
	}
	if started != nil {
		started(run)
	}
	return g.Wait()
}

// newStores returns a role's local stores. A store that has not caught up
// with its changelog for nearly as long as the changelog keeps tombstones is
// restored instead of reused (a day's margin for clocks and the log
// cleaner's schedule). A store far behind its changelog reads it over
// cfg.Kafka's connection before Goka restores the tail
// (localstore.Stores.ReadChangelog), until ctx ends.
func newStores(ctx context.Context, cfg Config, role string, log *slog.Logger) *localstore.Stores {
	st := localstore.New(filepath.Join(cfg.DataDir, role), log)
	st.MaxOffline, st.Clock = topology.TombstoneRetention-24*time.Hour, cfg.Clock
	st.ReadChangelog(ctx, cfg.Kafka.Brokers, cfg.Kafka.Sarama())
	return st
}

// withStores adds to a processor's options a producer that tells its local
// stores which table writes the changelog acknowledged.
func withStores(opts []goka.ProcessorOption, stores *localstore.Stores, k kafkaclient.Kafka) []goka.ProcessorOption {
	return append(slices.Clip(opts), goka.WithProducerBuilder(stores.Producer(k.ProducerBuilder)))
}

// pprofHandler serves net/http/pprof's pages under /debug/pprof/.
func pprofHandler() http.Handler {
	m := http.NewServeMux()
	m.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	m.HandleFunc("/debug/pprof/profile", pprof.Profile)
	m.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	m.HandleFunc("/debug/pprof/trace", pprof.Trace)
	m.HandleFunc("/debug/pprof/", pprof.Index)
	return m
}

// humanize renders table values as indented protojson for the query page. A
// user's value is shown as the scheduler will record it, with the follow-ups
// that fired under fired (Scheduler.Settled).
func humanize(v any) (string, error) {
	if m, ok := v.(proto.Message); ok {
		return codec.IndentedJSON(m), nil
	}
	return fmt.Sprintf("%v", v), nil
}

// gokaLogger sends Goka's log lines to slog: debug, or warn when they
// report an error.
type gokaLogger struct{ l *slog.Logger }

func (g gokaLogger) Print(v ...any)   { g.log(fmt.Sprint(v...)) }
func (g gokaLogger) Println(v ...any) { g.log(strings.TrimSuffix(fmt.Sprintln(v...), "\n")) }
func (g gokaLogger) Printf(f string, v ...any) {
	g.log(fmt.Sprintf(f, v...))
}

func (g gokaLogger) log(msg string) {
	lvl := slog.LevelDebug
	if strings.Contains(strings.ToLower(msg), "error") {
		lvl = slog.LevelWarn
	}
	g.l.Log(context.Background(), lvl, msg, "component", "goka")
}
