package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched"
	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/app"
	"github.com/ivrsched/ivrsched/internal/policy"
	"github.com/ivrsched/ivrsched/internal/suppress"
	"github.com/ivrsched/ivrsched/processors/scheduler"
)

// roleFlags are the flags of the commands that run processors.
type roleFlags struct {
	kafkaFlags
	dataDir       string
	http          string // probes and metrics
	adminHTTP     string
	adminHTTPSet  bool // else the admin listener is on --http's address
	callbackHTTP  string
	pprof         string
	defaultDelay  time.Duration
	defaultScript string
	instanceID    string
	session       time.Duration
	limits        limitFlags
	tickGap       time.Duration
	retain        time.Duration
	defaultPolicy string
	adminToken    string // a file with the web page's admin token
	adminURL      string
	adminNetworks string
	// suppressionKey is --suppression-key-file's value; embedded: on the
	// embedded broker, where a process without a key makes one up.
	suppressionKey *string
	embedded       bool
	// The dialer's flags, registered by the commands that run it.
	dialing bool
	dialer  dialerFlags
}

func (r *roleFlags) register(fs *flag.FlagSet, brokersDefault, httpDefault string) {
	r.kafkaFlags.register(fs, brokersDefault)
	fs.StringVar(&r.dataDir, "data-dir", "ivrsched-data", "directory of this instance's local state (one per instance)")
	fs.StringVar(&r.http, "http", httpDefault, "address of the probes and metrics (/healthz, /readyz, /metrics); empty for none")
	fs.Func("admin-http", "address of the admin listener: the admin API (show, upcoming), the web page (/ui/), /policy and Goka's monitor and query pages, all behind the admin token, which a browser sends as the password of basic auth; without a token only a loopback address, phone numbers masked (default: --http's address, sharing its server; empty for none)", func(v string) error {
		r.adminHTTP, r.adminHTTPSet = v, true
		return nil
	})
	fs.StringVar(&r.callbackHTTP, "callback-http", "", "address of the providers' status callbacks (/callbacks/ only), for the public side of a proxy; needed with --public-url")
	fs.StringVar(&r.pprof, "pprof", "", "loopback address to serve /debug/pprof/ on (profiling); empty for none")
	fs.DurationVar(&r.defaultDelay, "default-delay", 24*time.Hour, "delay of the follow-up given to an onboarding event that has none")
	fs.StringVar(&r.defaultScript, "default-script", "welcome", "IVR script of the default follow-up")
	fs.StringVar(&r.instanceID, "instance-id", "", "static group membership id, unique per instance: a restart gets its partitions back at once")
	fs.DurationVar(&r.session, "session-timeout", 10*time.Second, "how long the group waits for a silent instance before moving its partitions")
	r.limits.register(fs)
	fs.DurationVar(&r.retain, "retain", 30*24*time.Hour, "remove a user with nothing pending once its last call and last command are this old (a tombstone, reported as expired on followup-events; the dialer forgets the user too); 0 keeps every user")
	fs.StringVar(&r.defaultPolicy, "default-policy", "window", "the calling policy while none is set (ivrsched policy set): window (08:00-21:00 in the user's local time, every day) or none (every call at its due time)")
	fs.StringVar(&r.adminURL, "admin-url", "", "the URL at which the CLI and other instances reach this instance's admin listener, announced in the consumer groups (default: http://<--admin-http>, an unspecified host replaced by the host name)")
	registerNetworks(fs, &r.adminNetworks)
	fs.StringVar(&r.adminToken, "admin-token-file", "", "a file holding the admin token (16 characters or more) that the admin listener and the web page's actions ask for (default: $"+adminTokenEnv+"; neither: the actions are off, and the admin listener is on loopback only, phone numbers masked)")
	r.suppressionKey = suppressionKeyFlag(fs)
	fs.DurationVar(&r.tickGap, "tick-gap", 2*time.Millisecond, "shortest time between two due-index ticks of a partition: longer means fewer tick messages and more lateness")
}

func (r *roleFlags) config(clientID string) (app.Config, error) {
	k, err := r.kafka(clientID)
	if err != nil {
		return app.Config{}, err
	}
	log, err := r.logger()
	if err != nil {
		return app.Config{}, err
	}
	switch {
	case r.dataDir == "":
		return app.Config{}, badFlag("data-dir", "empty; want a directory path")
	case r.defaultDelay < 0:
		return app.Config{}, badFlag("default-delay", "%v; want a duration >= 0 like 24h", r.defaultDelay)
	}
	adminHTTP := r.http
	if r.adminHTTPSet {
		adminHTTP = r.adminHTTP
	}
	for _, l := range []struct{ name, addr string }{{"http", r.http}, {"admin-http", adminHTTP}, {"callback-http", r.callbackHTTP}, {"pprof", r.pprof}} {
		if l.addr == "" {
			continue
		}
		if err := checkHostPort(l.addr); err != nil {
			return app.Config{}, badFlag(l.name, "%q is not host:port (%v)", l.addr, err)
		}
	}
	switch {
	case r.pprof != "" && !app.IsLoopback(r.pprof):
		return app.Config{}, badFlag("pprof", "%s is not a loopback address; want one like 127.0.0.1:6060", r.pprof)
	case r.callbackHTTP != "" && (r.callbackHTTP == adminHTTP || r.callbackHTTP == r.pprof):
		return app.Config{}, badFlag("callback-http", "%s is also the admin listener's or pprof's: the status callbacks' listener is public, give it an address of its own", r.callbackHTTP)
	}
	if r.retain != 0 && r.retain < time.Minute {
		return app.Config{}, badFlag("retain", "%v; want 0 (keep every user) or at least 1m, like 720h", r.retain)
	}
	if r.tickGap < time.Millisecond || r.tickGap > time.Second {
		return app.Config{}, badFlag("tick-gap", "%v; want 1ms to 1s", r.tickGap)
	}
	if r.session < time.Second || r.session > 5*time.Minute {
		return app.Config{}, badFlag("session-timeout", "%v; want 1s to 5m", r.session)
	}
	k.InstanceID, k.SessionTimeout = r.instanceID, r.session
	lim, err := r.limits.limits()
	if err != nil {
		return app.Config{}, err
	}
	var def *policy.Policy
	switch r.defaultPolicy {
	case "window":
		def = policy.Default()
	case "none":
	default:
		return app.Config{}, badFlag("default-policy", "%q; want window or none", r.defaultPolicy)
	}
	cfg := app.Config{
		DefaultPolicy: def,
		Limits:        lim,
		TickGap:       r.tickGap,
		Retain:        r.retain,
		Kafka:         k,
		Topics:        r.topics(),
		DataDir:       r.dataDir,
		HTTP:          r.http,
		AdminHTTP:     adminHTTP,
		CallbackHTTP:  r.callbackHTTP,
		PprofHTTP:     r.pprof,
		Default:       scheduler.DefaultFollowUp{Delay: r.defaultDelay, Action: &pb.Action{IvrScript: r.defaultScript}},
		Logger:        log,
		Metrics:       processRegistry(),
	}
	if r.adminURL != "" {
		if u, err := url.Parse(r.adminURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return app.Config{}, badFlag("admin-url", "%q; want a URL like http://ivrsched-0.ivrsched:9095", r.adminURL)
		}
		cfg.AdminURL = strings.TrimSuffix(r.adminURL, "/")
	}
	if cfg.AdminToken, err = adminToken(r.adminToken, os.Getenv); err != nil {
		return app.Config{}, err
	}
	if cfg.AdminPeers, err = adminPeers(r.adminNetworks); err != nil {
		return app.Config{}, err
	}
	if adminHTTP != "" && cfg.AdminToken == "" && !app.IsLoopback(adminHTTP) {
		from := ""
		if !r.adminHTTPSet {
			from = " (--http's: the admin listener shares it unless --admin-http is given)"
		}
		return app.Config{}, badFlag("admin-http", "%s%s is not a loopback address, and there is no admin token: the admin API and Goka's pages show phone numbers. Set $%s or --admin-token-file, or give --admin-http a loopback address, or --admin-http= for none", adminHTTP, from, adminTokenEnv)
	}
	if r.dialing {
		if err := r.dialer.apply(&cfg, os.Getenv); err != nil {
			return app.Config{}, err
		}
	}
	switch cfg.SuppressionKey, err = suppress.LoadKey(*r.suppressionKey, os.Getenv); {
	case errors.Is(err, suppress.ErrNoKey) && r.embedded:
		path := filepath.Join(r.dataDir, embeddedKeyFile)
		if cfg.SuppressionKey, err = embeddedSuppressionKey(path); err != nil {
			return app.Config{}, err
		}
		cfg.Warnings = append(cfg.Warnings, "no suppression key: the do-not-call list on the embedded broker is keyed by "+path+", kept with its data; `ivrsched suppress --suppression-key-file "+path+"` edits it. Set "+suppress.EnvKey+" or --suppression-key-file for a deployment")
	case err != nil:
		return app.Config{}, badFlag("suppression-key-file", "%v", err)
	}
	return cfg, nil
}

// processRegistry is the registry of the process's metrics, served on
// --http's /metrics: the roles' (app.Run registers them), the Go runtime's
// and the process's.
func processRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func cmdRun(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("run", "Runs the scheduler with its due index, the dialer and the web UI in one process. Without --brokers it\nstarts an embedded Kafka-protocol broker that outside clients can use too.")
	var r roleFlags
	r.register(fs, "", "127.0.0.1:9095")
	r.dialing = true
	r.dialer.register(fs)
	embeddedAddr := fs.String("embedded-addr", defaultBrokers, "address of the embedded broker (when --brokers is empty)")
	demo := fs.Bool("demo", false, "also feed sample onboarding events: the built-in sample (testdata/demo-onboarding.jsonl), or --demo-file")
	demoFile := fs.String("demo-file", "", "sample onboarding events for --demo, one protojson Command per line (empty: the built-in sample)")
	if err := parse(fs, args); err != nil {
		return err
	}
	defer privateUmask()()
	var demoCmds []*pb.Command
	if *demo {
		var err error
		if demoCmds, err = readDemo(*demoFile); err != nil {
			return err
		}
	}
	if r.brokers == "" {
		if r.security.set() {
			return badFlag("brokers", "required with TLS or SASL flags (the embedded broker speaks plaintext)")
		}
		if err := checkHostPort(*embeddedAddr); err != nil {
			return badFlag("embedded-addr", "%q is not host:port (%v)", *embeddedAddr, err)
		}
		if err := os.MkdirAll(r.dataDir, 0o700); err != nil {
			return fmt.Errorf("data dir: %w", err)
		}
		b, err := app.StartEmbedded(*embeddedAddr, filepath.Join(r.dataDir, "broker"))
		if err != nil {
			return err
		}
		defer b.Close()
		r.brokers = b.Addr()
		r.embedded = true
		fmt.Fprintf(stdout, "embedded Kafka-protocol broker listening on %s\n", b.Addr())
	}
	cfg, err := r.config("ivrsched-run")
	if err != nil {
		return err
	}
	return app.Run(ctx, cfg, app.Roles{Scheduler: true, Dialer: true}, func(run *app.Running) {
		if cfg.AdminHTTP != "" {
			fmt.Fprintf(stdout, "web UI on http://%s/ (ivrsched's page at /ui/; query a user at /query/%s/<user id>)\n", cfg.AdminHTTP, cfg.Topics.SchedulerTable())
		}
		if len(demoCmds) > 0 {
			go feedDemo(ctx, cfg, run, demoCmds)
		}
	})
}

func cmdScheduler(ctx context.Context, args []string, _ io.Writer) error {
	return runRole(ctx, "scheduler", args, app.Roles{Scheduler: true})
}

func cmdDialer(ctx context.Context, args []string, _ io.Writer) error {
	return runRole(ctx, "dialer", args, app.Roles{Dialer: true})
}

func runRole(ctx context.Context, name string, args []string, roles app.Roles) error {
	cfg, err := roleConfig(name, args, roles)
	if err != nil {
		return err
	}
	defer privateUmask()()
	return app.Run(ctx, cfg, roles, nil)
}

// roleConfig parses the flags of the command that runs roles (scheduler,
// dialer): what runRole runs, and what the deploy manifest's test checks.
func roleConfig(name string, args []string, roles app.Roles) (app.Config, error) {
	fs := newFlagSet(name, fmt.Sprintf("Runs the %s role against --brokers. Start several instances, each with its own\n--data-dir, to share the partitions.", name))
	var r roleFlags
	r.register(fs, defaultBrokers, "")
	if roles.Dialer {
		r.dialing = true
		r.dialer.register(fs)
	}
	if err := parse(fs, args); err != nil {
		return app.Config{}, err
	}
	return r.config("ivrsched-" + name)
}

// readDemo reads one protojson Command per line from path, or from the
// built-in sample when path is empty; blank and # lines are skipped.
func readDemo(path string) ([]*pb.Command, error) {
	var src io.Reader = bytes.NewReader(ivrsched.DemoOnboarding)
	if path != "" {
		f, err := os.Open(path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil, badFlag("demo-file", "%s not found", path)
			}
			return nil, fmt.Errorf("demo file: %w", err)
		}
		defer f.Close()
		src = f
	} else {
		path = "testdata/demo-onboarding.jsonl (built in)"
	}
	var out []*pb.Command
	sc := bufio.NewScanner(src)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var c pb.Command
		if err := protojson.Unmarshal([]byte(line), &c); err != nil {
			return nil, fmt.Errorf("demo file %s line %d: %w", path, n, err)
		}
		out = append(out, &c)
	}
	return out, sc.Err()
}

// feedDemo produces the demo commands once the processors are ready, with
// delays counted from now.
func feedDemo(ctx context.Context, cfg app.Config, run *app.Running, cmds []*pb.Command) {
	log := cfg.Logger
	select {
	case <-run.Ready():
	case <-ctx.Done():
		return
	}
	em, err := goka.NewEmitter(cfg.Kafka.Brokers, cfg.Topics.Onboarding, new(codec.Command), cfg.Kafka.EmitterOptions()...)
	if err != nil {
		log.Error("demo feed", "err", err)
		return
	}
	defer em.Finish()
	now := timestamppb.Now()
	for _, c := range cmds {
		c.RequestedAt = now
		if _, err := em.Emit(c.GetUserId(), c); err != nil {
			log.Error("demo feed", "user", c.GetUserId(), "err", err)
			return
		}
	}
	log.Info("demo: onboarding events sent; calls follow within a minute", "users", len(cmds))
}

// adminTokenEnv holds the web page's admin token, when no file is given.
const adminTokenEnv = "IVRSCHED_ADMIN_TOKEN"

// adminToken reads the admin token from file, else from the environment:
// never from a flag value, which ps shows. Either way it has
// admin.MinTokenLength characters or more.
func adminToken(file string, getenv func(string) string) (string, error) {
	if file == "" {
		tok := strings.TrimSpace(getenv(adminTokenEnv))
		if tok != "" && len(tok) < admin.MinTokenLength {
			return "", usageError{fmt.Sprintf("$%s holds %d characters; want a token of %d or more", adminTokenEnv, len(tok), admin.MinTokenLength)}
		}
		return tok, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", badFlag("admin-token-file", "%v", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < admin.MinTokenLength {
		return "", badFlag("admin-token-file", "%s holds %d characters; want a token of %d or more", file, len(tok), admin.MinTokenLength)
	}
	return tok, nil
}
