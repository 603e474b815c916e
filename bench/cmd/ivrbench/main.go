// Command ivrbench runs one workload against ivrsched and the systems users
// pick instead, one after the other on this machine, and writes a markdown
// table (stdout), results.json and SVG plots.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ivrsched/ivrsched/bench/harness"
	"github.com/ivrsched/ivrsched/bench/systems/floor"
	"github.com/ivrsched/ivrsched/bench/systems/ivrsched"
	"github.com/ivrsched/ivrsched/internal/kafkatest"
)

type settings struct {
	n, burst, crash, partitions    int
	payload, repeat                int
	lead, window, wait, crashWait  time.Duration
	systems, out, kafka, brokerJIT string
	brokerConf, brokerJVM          string
	warmup                         time.Duration
	scale                          int
	scaleFor                       time.Duration
	scaleSettle                    time.Duration
	prefire                        int
	prefireRestart                 bool
	seed                           uint64
	dialer                         int
	dialerLatencies, dialerArgs    string
	dialerBin                      string
	retention                      harness.RetentionWorkload
	logs                           string
	ivrschedBin, ivrschedFlags     string
	idle                           harness.IdleWorkload
	idlePartitions                 int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ivrbench:", err)
		var bad badFlag
		switch {
		case errors.Is(err, flag.ErrHelp):
			os.Exit(0)
		case errors.As(err, &bad) || strings.HasPrefix(err.Error(), "flag provided but not defined") || strings.HasPrefix(err.Error(), "invalid value"):
			os.Exit(2)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ivrbench", flag.ContinueOnError)
	var s settings
	fs.IntVar(&s.n, "n", 20000, "follow-ups of the steady phase, for n/2 users (0: skip the side-by-side phases: steady, burst, kill -9)")
	fs.IntVar(&s.burst, "burst", 0, "follow-ups of the burst phase, all due at once, for burst/2 users (0: n)")
	fs.IntVar(&s.repeat, "repeat", 1, "run every system's phases this many times, the systems in a rotated order each time; the tables show the median and the min–max")
	fs.IntVar(&s.crash, "crash", 4000, "follow-ups of the kill -9 phase (0: skip it)")
	fs.IntVar(&s.partitions, "partitions", 8, "partitions of every topic")
	fs.IntVar(&s.payload, "payload", 64, "payload bytes per follow-up")
	fs.DurationVar(&s.lead, "lead", 8*time.Second, "time from the start of scheduling to the first due time")
	fs.DurationVar(&s.window, "window", 10*time.Second, "steady phase: due times spread over this window")
	fs.DurationVar(&s.wait, "wait", 30*time.Second, "how long after the last due time to wait for fires")
	fs.DurationVar(&s.crashWait, "crash-wait", 60*time.Second, "kill -9 phase: how long after the last due time to wait before a follow-up counts as lost")
	fs.StringVar(&s.systems, "systems", "all", "comma-separated systems to run, or all: "+strings.Join(names(), ","))
	fs.StringVar(&s.out, "out", "bench-results", "directory for results.json and the plots")
	fs.StringVar(&s.kafka, "kafka", "", "bootstrap address of an existing Kafka (default: start Apache Kafka)")
	fs.Uint64Var(&s.seed, "seed", 1, "random seed of the workload")
	fs.StringVar(&s.brokerJIT, "broker-jit", "full", "JIT of the Kafka broker this benchmark starts: full (the JVM's default, as in production) or c1 (the test suite's quick start)")
	fs.StringVar(&s.brokerConf, "broker", "production", "configuration of the Kafka broker this benchmark starts: production (heap, collector and log segments of a production broker of this size, see brokerProfiles) or test (the test suite's: a small heap, the serial collector, 1 MiB segments)")
	fs.StringVar(&s.brokerJVM, "broker-jvm", "", "more JVM flags of the Kafka broker this benchmark starts, after the others (e.g. \"-Xlog:gc:file=gc.log\")")
	fs.DurationVar(&s.warmup, "warmup", 10*time.Second, "load Kafka for this long before the first system, so the broker's JIT is done (0: no warm-up)")
	fs.IntVar(&s.prefire, "prefire", 0, "fire this many follow-ups (over 2 s, 3 s after scheduling them) before each steady phase, every system alike, and leave them out of its figures: the first fires on a system's fresh topics are not steady (0: none; their lateness goes in results.json as prefire)")
	fs.BoolVar(&s.prefireRestart, "prefire-restart", false, "with -prefire: after the first fires, kill -9 each system (not the floor) and start it again on its topics, then fire as many again (results.json after_restart): does a restart pay the first fires' cost again?")
	fs.IntVar(&s.scale, "scale", 0, "also run the scale phase with this many follow-ups pending, for ivrsched-kafka, -repeat times, each after a run of kafka-floor when it is among -systems (0: skip)")
	fs.DurationVar(&s.scaleSettle, "scale-settle", 0, "scale phase: wait up to this long after the intake for ivrsched and the broker to go quiet (compactions) before the steady phase (0: do not wait)")
	fs.DurationVar(&s.scaleFor, "scale-for", 0, "scale phase: stop scheduling after this long, with as many pending as were taken in by then, and record the intake's progress (0: schedule all of -scale)")
	fs.IntVar(&s.dialer, "dialer", 0, "also run the dialer phase with this many calls per provider latency, -repeat times each (0: skip)")
	fs.StringVar(&s.dialerLatencies, "dialer-latencies", "0ms,50ms,300ms", "dialer phase: the provider's latencies, one run each per repetition")
	fs.StringVar(&s.dialerArgs, "dialer-args", "", "dialer phase: more flags of `ivrsched dialer`, e.g. \"--max-in-flight 500\"")
	fs.StringVar(&s.dialerBin, "dialer-bin", "", "dialer phase: an ivrsched binary to measure instead of this checkout's (an older version, for a before-and-after)")
	fs.IntVar(&s.retention.Idle, "retention", 0, "also run the retention phase with this many idle users (their follow-ups fire, then retention removes them), for ivrsched's scheduler and dialer as processes (0: skip)")
	fs.IntVar(&s.retention.Pending, "retention-pending", 100000, "retention phase: follow-ups pending hours ahead, for half as many users")
	fs.DurationVar(&s.retention.Retain, "retention-retain", time.Minute, "retention phase: the scheduler's --retain once the idle users are measured (at least 1m)")
	fs.IntVar(&s.retention.Probes, "retention-probes", 2000, "retention phase: probe follow-ups per restart and per rebalance")
	fs.DurationVar(&s.retention.ProbeWindow, "retention-window", 20*time.Second, "retention phase: the rebalance's probes are due over this window from the join")
	fs.BoolVar(&s.retention.Compact, "retention-compact", false, "retention phase: then have the broker compact the scheduler's table (its segments rolled every second) and measure once more")
	fs.StringVar(&s.logs, "logs", "", "copy the process logs of every run (a folder per system and repetition) and of the retention phase into this directory (default: none)")
	fs.StringVar(&s.ivrschedBin, "ivrsched-bin", "", "side-by-side and scale phases: an ivrsched binary to run instead of a build of this checkout (an older version, for a before-and-after)")
	fs.StringVar(&s.ivrschedFlags, "ivrsched-flags", "", "side-by-side and scale phases: more flags of ivrsched's scheduler (the single process of ivrsched-kafka), e.g. \"--log-level info\" with -logs")
	fs.DurationVar(&s.idle.Measure, "idle", 0, "also run the idle phase: for each of -systems, -repeat times, measure its processes' CPU and the broker's over this long while it holds -idle-pending follow-ups none of which is due (kafka-floor: the broker with no client) (0: skip)")
	fs.IntVar(&s.idle.Pending, "idle-pending", 4000, "idle phase: follow-ups pending, due from an hour ahead")
	fs.DurationVar(&s.idle.Settle, "idle-settle", 10*time.Second, "idle phase: wait this long after the pending follow-ups are applied before measuring")
	fs.IntVar(&s.idlePartitions, "idle-partitions", 0, "idle phase: partitions of every topic (0: -partitions)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if s.n < 0 {
		return badFlag{fmt.Errorf("-n %d: want 0 (skip the side-by-side phases) or more", s.n)}
	}
	if s.idle.Measure < 0 || s.idle.Settle < 0 || s.idle.Pending < 0 || s.idlePartitions < 0 {
		return badFlag{fmt.Errorf("-idle %v, -idle-settle %v, -idle-pending %d, -idle-partitions %d: want durations and counts >= 0", s.idle.Measure, s.idle.Settle, s.idle.Pending, s.idlePartitions)}
	}
	if s.idlePartitions == 0 {
		s.idlePartitions = s.partitions
	}
	s.idle.Payload, s.idle.Seed = s.payload, s.seed
	if s.prefire < 0 {
		return badFlag{fmt.Errorf("-prefire %d: want a count >= 0", s.prefire)}
	}
	if s.prefireRestart && s.prefire == 0 {
		return badFlag{errors.New("-prefire-restart needs -prefire N: it fires N again after the restart")}
	}
	if s.repeat < 1 {
		return badFlag{fmt.Errorf("-repeat %d: want 1 or more", s.repeat)}
	}
	if s.burst < 0 {
		return badFlag{fmt.Errorf("-burst %d: want 0 (as -n) or more", s.burst)}
	}
	if s.burst == 0 {
		s.burst = s.n
	}
	if s.retention.Idle < 0 || s.retention.Idle > 0 && (s.retention.Pending < 2 || s.retention.Probes < 2 || s.retention.ProbeWindow <= 0 || s.retention.Retain < time.Minute) {
		return badFlag{fmt.Errorf("-retention %d: want 0 or more, with -retention-pending and -retention-probes at least 2, -retention-window positive and -retention-retain at least 1m", s.retention.Idle)}
	}
	var jvm []string
	switch s.brokerJIT {
	case "full":
		jvm = []string{"-XX:TieredStopAtLevel=4"} // overrides the test broker's C1-only default
	case "c1":
	default:
		return badFlag{fmt.Errorf("-broker-jit %q: want full or c1", s.brokerJIT)}
	}
	profile, ok := brokerProfiles[s.brokerConf]
	if !ok {
		return badFlag{fmt.Errorf("-broker %q: want production or test", s.brokerConf)}
	}
	jvm = slices.Concat(profile.jvm, jvm, strings.Fields(s.brokerJVM))
	if s.warmup < 0 {
		return badFlag{fmt.Errorf("-warmup %v: want a duration >= 0", s.warmup)}
	}
	chosen, err := choose(s.systems)
	if err != nil {
		return badFlag{err}
	}
	var latencies []time.Duration
	if s.dialer > 0 {
		if latencies, err = ivrsched.ParseLatencies(s.dialerLatencies); err != nil {
			return badFlag{fmt.Errorf("-dialer-latencies: %w", err)}
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	work, err := os.MkdirTemp("", "ivrbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := os.MkdirAll(s.out, 0o755); err != nil {
		return err
	}

	env := harness.Env{WorkDir: work, Partitions: s.partitions, Log: log}
	var kafka harness.Backend
	kafkaDir := ""
	if s.kafka != "" {
		env.KafkaBrokers = s.kafka
		kafka = harness.KafkaBackend{Brokers: []string{s.kafka}, Pid: func() int { return 0 }}
	} else if needs(chosen, "kafka") || s.scale > 0 || s.dialer > 0 || s.retention.Idle > 0 {
		log.Info("starting Apache Kafka", "version", kafkatest.KafkaVersion, "config", s.brokerConf, "jit", s.brokerJIT, "jvm", jvm)
		// The test broker's JVM flags, with the JIT of a production broker
		// unless -broker-jit c1; the warm-up below keeps its compilation
		// out of the first system's figures.
		opts := []kafkatest.Option{kafkatest.WithJVMArgs(jvm...)}
		for _, k := range slices.Sorted(maps.Keys(profile.props)) {
			opts = append(opts, kafkatest.WithProperty(k, profile.props[k]))
		}
		b, err := kafkatest.Start(ctx, opts...)
		if err != nil {
			return fmt.Errorf("kafka: %w", err)
		}
		defer b.Stop()
		env.KafkaBrokers = b.Addr()
		kafkaDir = b.DataDir()
		kafka = harness.KafkaBackend{Brokers: []string{b.Addr()}, DataDir: kafkaDir, Pid: b.PID}
	}
	if kafka != nil && s.warmup > 0 {
		log.Info("warming Kafka up", "for", s.warmup)
		n, err := harness.WarmKafka(ctx, []string{env.KafkaBrokers}, s.partitions, s.warmup)
		if err != nil {
			return err
		}
		log.Info("Kafka warmed up", "records", n)
	}
	var redis harness.Backend
	if needs(chosen, "redis") {
		addr, pid, stopRedis, err := startRedis(ctx, filepath.Join(work, "redis"))
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		defer stopRedis()
		env.RedisAddr = addr
		redis = harness.RedisBackend{Addr: addr, Pid: pid}
	}

	w := harness.Workload{N: s.n, Burst: s.burst, Users: s.n / 2, Lead: s.lead, Window: s.window, Payload: s.payload, Crash: s.crash, Wait: s.wait, CrashWait: s.crashWait, Seed: s.seed, Prefire: s.prefire, PrefireRestart: s.prefireRestart}
	var results []harness.Result
	for rep := range s.repeat {
		if s.n == 0 {
			break
		}
		for _, e := range harness.Rotated(chosen, rep) {
			name := e.name
			if rep > 0 {
				name = fmt.Sprintf("%s-r%d", e.name, rep+1) // topics, queues and groups of its own
			}
			sys := e.make(name)
			s.binary(sys)
			subj := harness.Subject{System: sys, Name: e.backend}
			switch e.backend {
			case "kafka":
				subj.Backend = kafka
			case "redis":
				subj.Backend = redis
			case "embedded":
				subj.Backend = embeddedBackend(sys)
			}
			env.WorkDir = filepath.Join(work, name)
			if err := os.MkdirAll(env.WorkDir, 0o755); err != nil {
				return err
			}
			log.Info("benchmark", "system", e.name, "repetition", rep+1, "of", s.repeat)
			r := harness.Run(ctx, subj, env, w)
			r.System, r.Repetition = e.name, rep+1
			results = append(results, r)
			if s.logs != "" {
				if err := copyLogs(env.WorkDir, filepath.Join(s.logs, name)); err != nil {
					log.Warn("copy the logs", "err", err)
				}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	var idles []harness.IdleResult
	for rep := range s.repeat {
		if s.idle.Measure <= 0 || ctx.Err() != nil {
			break
		}
		for _, e := range harness.Rotated(chosen, rep) {
			if e.backend != "kafka" || kafka == nil {
				continue // the idle phase measures a Kafka broker
			}
			name := fmt.Sprintf("%s-idle%d-r%d", e.name, s.idlePartitions, rep+1)
			sys := e.make(name)
			s.binary(sys)
			ienv := env
			ienv.Partitions = s.idlePartitions
			ienv.WorkDir = filepath.Join(work, name)
			if err := os.MkdirAll(ienv.WorkDir, 0o755); err != nil {
				return err
			}
			log.Info("benchmark", "system", e.name, "phase", "idle", "repetition", rep+1, "of", s.repeat)
			r := harness.RunIdle(ctx, harness.Subject{System: sys, Backend: kafka, Name: e.backend}, ienv, s.idle)
			r.System, r.Repetition = e.name, rep+1
			idles = append(idles, r)
			if s.logs != "" {
				if err := copyLogs(ienv.WorkDir, filepath.Join(s.logs, name)); err != nil {
					log.Warn("copy the logs", "err", err)
				}
			}
		}
	}
	var scales []harness.ScaleResult
	for rep := range s.repeat {
		if s.scale <= 0 || kafka == nil || ctx.Err() != nil {
			break
		}
		sfx := ""
		if rep > 0 {
			sfx = fmt.Sprintf("-r%d", rep+1)
		}
		// The floor once more, just before: the scale phase's ratio is to
		// a floor of the same minutes, not to the repetitions' above.
		var floorP99 float64
		if chose(chosen, "kafka-floor") {
			env.WorkDir = filepath.Join(work, "scale-floor"+sfx)
			if err := os.MkdirAll(env.WorkDir, 0o755); err != nil {
				return err
			}
			log.Info("benchmark", "system", "kafka-floor", "phase", "scale", "repetition", rep+1, "of", s.repeat)
			fr := harness.Run(ctx, harness.Subject{System: floor.New("kafka-floor-scale" + sfx), Name: "kafka", Backend: kafka}, env, w)
			if fr.Error == "" && fr.Steady != nil {
				floorP99 = fr.Steady.P99Ms
			}
		}
		// ivrsched-kafka, and the scheduler alone when it is among -systems.
		subjects := []harness.Scalable{ivrsched.New("ivrsched-kafka-scale"+sfx, ivrsched.OneProcess, scaleArgs...)}
		if chose(chosen, "ivrsched-kafka-sched") {
			subjects = append(subjects, ivrsched.NewSchedulerOnly("ivrsched-kafka-sched-scale"+sfx, scaleArgs...))
		}
		for _, sys := range subjects {
			s.binary(sys)
			env.WorkDir = filepath.Join(work, sys.Name())
			if err := os.MkdirAll(env.WorkDir, 0o755); err != nil {
				return err
			}
			sr := harness.RunScale(ctx, sys, kafka, env, harness.Scale{Pending: s.scale, For: s.scaleFor, Settle: s.scaleSettle}, w)
			sr.Repetition, sr.FloorSteadyP99Ms = rep+1, floorP99
			scales = append(scales, sr)
		}
	}
	var dialers []ivrsched.DialerResult
	if s.dialer > 0 && kafka != nil {
		env.WorkDir = filepath.Join(work, "dialer")
		if err := os.MkdirAll(env.WorkDir, 0o755); err != nil {
			return err
		}
		log.Info("benchmark", "phase", "dialer", "calls", s.dialer, "latencies", s.dialerLatencies)
		dialers = ivrsched.RunDialer(ctx, env, ivrsched.DialerPhase{Calls: s.dialer, Latencies: latencies, Repeat: s.repeat, Args: strings.Fields(s.dialerArgs), Bin: s.dialerBin, Broker: kafka})
	}
	var rets []harness.RetentionResult
	if s.retention.Idle > 0 && kafka != nil && ctx.Err() == nil {
		env.WorkDir = filepath.Join(work, "retention")
		if err := os.MkdirAll(env.WorkDir, 0o755); err != nil {
			return err
		}
		// Scheduler and dialer apart, so that a second scheduler can join;
		// the scheduler logs at info what opening each partition cost.
		sys := ivrsched.New("ivrsched-retention", ivrsched.Processes, scaleArgs...).WithSchedulerFlags("--log-level", "info")
		rw := s.retention
		rw.Workload = w
		r := harness.RunRetention(ctx, sys, kafka, env, rw)
		rets = append(rets, r)
		if s.logs != "" {
			if err := copyLogs(env.WorkDir, s.logs); err != nil {
				log.Warn("copy the logs", "err", err)
			}
		}
	}
	var order []string
	for _, e := range chosen {
		order = append(order, e.name)
	}
	return report(stdout, s, order, results, idles, scales, dialers, rets)
}

func report(stdout io.Writer, s settings, order []string, rs []harness.Result, idles []harness.IdleResult, scales []harness.ScaleResult, dialers []ivrsched.DialerResult, rets []harness.RetentionResult) error {
	md, err := os.Create(filepath.Join(s.out, "latest.md"))
	if err != nil {
		return err
	}
	defer md.Close()
	stdout = io.MultiWriter(stdout, md)
	fmt.Fprintf(stdout, "Command: `ivrbench %s`\n\n", strings.Join(os.Args[1:], " "))
	if len(rs) > 0 {
		fmt.Fprintf(stdout, "ivrbench: steady %d follow-ups for %d users over %v, burst %d at once for %d users, lead %v, %d partitions, payload %d B, kill -9 phase %d, %d repetitions; Kafka %s (%s broker, JIT %s, warm-up %v); %s, %d CPUs, %s\n\n",
			s.n, s.n/2, s.window, s.burst, s.burst/2, s.lead, s.partitions, s.payload, s.crash, s.repeat, kafkatest.KafkaVersion, s.brokerConf, s.brokerJIT, s.warmup, runtime.Version(), runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))
		harness.SummaryMarkdown(stdout, rs, order, "ivrsched-kafka")
		for rep := 1; rep <= s.repeat; rep++ {
			var these []harness.Result
			for _, r := range rs {
				if r.Repetition == rep {
					these = append(these, r)
				}
			}
			fmt.Fprintf(stdout, "\nRepetition %d of %d, in the order run:\n\n", rep, s.repeat)
			harness.Markdown(stdout, these, "ivrsched-kafka")
		}
	} else {
		fmt.Fprintf(stdout, "ivrbench: lead %v, %d partitions, payload %d B; Kafka %s (JIT %s, warm-up %v); %s, %d CPUs, %s\n",
			s.lead, s.partitions, s.payload, kafkatest.KafkaVersion, s.brokerJIT, s.warmup, runtime.Version(), runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))
	}
	harness.IdleMarkdown(stdout, idles, order)
	harness.ScaleMarkdown(stdout, scales)
	scaleVsFloor(stdout, scales)
	ivrsched.DialerMarkdown(stdout, dialers)
	harness.RetentionMarkdown(stdout, rets)
	rs = withSamples(rs, order)
	doc := map[string]any{
		"settings": map[string]any{"n": s.n, "burst": s.burst, "repeat": s.repeat, "users": s.n / 2, "window": s.window.String(), "lead": s.lead.String(), "partitions": s.partitions,
			"payload_bytes": s.payload, "broker": s.brokerConf, "broker_jvm": s.brokerJVM, "broker_jit": s.brokerJIT, "warmup": s.warmup.String(), "crash_n": s.crash, "crash_wait": s.crashWait.String(), "prefire": s.prefire, "prefire_restart": s.prefireRestart, "go": runtime.Version(), "cpus": runtime.NumCPU(), "kafka": kafkatest.KafkaVersion,
			"at": time.Now().UTC()},
		"results": rs,
		"summary": harness.Summarize(rs, order),
		"scale":   scales,
		"dialer":  dialers,
	}
	if len(rets) > 0 {
		doc["retention"] = rets
	}
	if len(idles) > 0 {
		doc["idle"] = map[string]any{"measure": s.idle.Measure.String(), "settle": s.idle.Settle.String(), "pending": s.idle.Pending, "partitions": s.idlePartitions,
			"results": idles, "summary": harness.SummarizeIdle(idles, order)}
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.out, "results.json"), b, 0o644); err != nil {
		return err
	}
	rs = medianRuns(rs, order) // the plots show each system's run of median steady p99 (with its samples)
	plots := map[string]func(io.Writer){
		"lateness.svg": func(w io.Writer) { harness.LatencySVG(w, rs) },
		"burst.svg": func(w io.Writer) {
			harness.BarsSVG(w, rs, "Burst: fires per second when all follow-ups are due at once", "/s", func(r harness.Result) float64 { return r.Burst.FirePerSec })
		},
		"schedule.svg": func(w io.Writer) {
			harness.BarsSVG(w, rs, "Scheduling throughput", "/s", func(r harness.Result) float64 { return r.Steady.SchedulePerSec })
		},
		"cpu.svg": func(w io.Writer) {
			harness.BarsSVG(w, rs, "CPU seconds per 1,000 follow-ups (system + broker/Redis), steady phase", "s", func(r harness.Result) float64 { return r.Steady.CPUPer1000 })
		},
	}
	if len(rs) == 0 {
		plots = nil // no system ran the common phases
	}
	for name, draw := range plots {
		f, err := os.Create(filepath.Join(s.out, name))
		if err != nil {
			return err
		}
		draw(f)
		if err := f.Close(); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "\nresults.json and plots in %s\n", s.out)
	return nil
}

// copyLogs copies the *.log files of dir into to.
func copyLogs(dir, to string) error {
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, filepath.Base(l)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// medianRuns keeps, of each system in order, the error-free run whose
// steady p99 is the median of its runs (the lower one of an even count).
func medianRuns(rs []harness.Result, order []string) []harness.Result {
	var out []harness.Result
	for _, name := range order {
		var runs []harness.Result
		for _, r := range rs {
			if r.System == name && r.Error == "" && r.Steady != nil {
				runs = append(runs, r)
			}
		}
		if len(runs) == 0 {
			continue
		}
		slices.SortFunc(runs, func(a, b harness.Result) int { return cmp.Compare(a.Steady.P99Ms, b.Steady.P99Ms) })
		out = append(out, runs[(len(runs)-1)/2])
	}
	return out
}

// scaleVsFloor writes each scale phase's steady p99 as a ratio to the
// floor's steady p99 measured just before it (the same rate and records,
// nothing pending), and their median and spread over the repetitions.
func scaleVsFloor(w io.Writer, scales []harness.ScaleResult) {
	type runs struct{ ratios, p99s, floors []float64 }
	by := map[string]*runs{}
	var order []string
	for _, s := range scales {
		if s.Error != "" || s.Steady == nil || s.FloorSteadyP99Ms <= 0 {
			continue
		}
		sys := strings.TrimSuffix(s.System, fmt.Sprintf("-r%d", s.Repetition))
		r := s.Steady.P99Ms / s.FloorSteadyP99Ms
		fmt.Fprintf(w, "\nScale phase %d, %s: with %d pending, its steady p99 is %.0f ms, %.2f× the floor's %.0f ms measured just before it (nothing pending).\n",
			s.Repetition, sys, s.Pending, s.Steady.P99Ms, r, s.FloorSteadyP99Ms)
		if by[sys] == nil {
			by[sys] = &runs{}
			order = append(order, sys)
		}
		b := by[sys]
		b.ratios, b.p99s, b.floors = append(b.ratios, r), append(b.p99s, s.Steady.P99Ms), append(b.floors, s.FloorSteadyP99Ms)
	}
	for _, sys := range order {
		if b := by[sys]; len(b.ratios) > 1 {
			fmt.Fprintf(w, "\n%s with them pending, over %d scale phases: steady p99 %s ms against the floor's %s ms, %s× the floor.\n",
				sys, len(b.ratios), harness.SpreadOf(b.p99s).Format("%.0f"), harness.SpreadOf(b.floors).Format("%.0f"), harness.SpreadOf(b.ratios).Format("%.2f"))
		}
	}
}

// withSamples is rs with the lateness samples kept only in each system's
// median run (the one plotted), so that results.json stays small.
func withSamples(rs []harness.Result, order []string) []harness.Result {
	keep := map[[2]any]bool{}
	for _, r := range medianRuns(rs, order) {
		keep[[2]any{r.System, r.Repetition}] = true
	}
	out := slices.Clone(rs)
	for i, r := range out {
		if keep[[2]any{r.System, r.Repetition}] {
			continue
		}
		for _, p := range []**harness.Phase{&out[i].Steady, &out[i].Burst} {
			if *p != nil {
				c := **p
				c.Sample = nil
				*p = &c
			}
		}
	}
	return out
}

// badFlag is an error in the flags: the command exits 2.
type badFlag struct{ error }

func (b badFlag) Unwrap() error { return b.error }

// binary makes sys, if it is an ivrsched, run -ivrsched-bin (when given)
// with -ivrsched-flags: in the side-by-side phases and the scale phase.
func (s settings) binary(sys harness.System) {
	is, ok := ivrsched.Of(sys)
	if !ok {
		return
	}
	if s.ivrschedBin != "" {
		is.WithBinary(s.ivrschedBin)
	}
	is.WithSchedulerFlags(strings.Fields(s.ivrschedFlags)...)
}
