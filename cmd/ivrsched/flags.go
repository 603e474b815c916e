package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ivrsched/ivrsched/internal/kafkaclient"
	"github.com/ivrsched/ivrsched/processors/scheduler"
	"github.com/ivrsched/ivrsched/topology"
)

// usageError is a bad flag or argument: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func badFlag(name, format string, args ...any) error {
	return usageError{fmt.Sprintf("--%s: %s", name, fmt.Sprintf(format, args...))}
}

// requireUser is the error of a command run without --user (none if user
// is set): every command about one user needs its id.
func requireUser(user string) error {
	if user == "" {
		return badFlag("user", "required; want a user id")
	}
	return nil
}

// newFlagSet returns a flag set whose parse errors are one line on stderr.
func newFlagSet(name, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // errors are reported in one line by parse
	help[fs] = func() {
		fs.SetOutput(os.Stdout)
		fmt.Fprintf(os.Stdout, "usage: ivrsched %s [flags]\n\n%s\n\nflags:\n", name, summary)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// help prints a flag set's --help text.
var help = map[*flag.FlagSet]func(){}

// parse parses args; a parse error becomes a usageError naming the flag.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help[fs]()
			return err
		}
		return usageError{err.Error() + " (see --help)"}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q (flags start with --, see --help)", fs.Arg(0))}
	}
	return nil
}

// kafkaFlags are the flags every command that talks to Kafka has.
type kafkaFlags struct {
	brokers     string
	prefix      string
	partitions  int
	replication int
	timeout     time.Duration
	flush       time.Duration
	fetchWait   time.Duration
	bgFetchWait givenDuration // deprecated: accepted, no effect
	logLevel    string
	security    securityFlags
}

const defaultBrokers = "127.0.0.1:9092"

func (k *kafkaFlags) register(fs *flag.FlagSet, brokersDefault string) {
	fs.StringVar(&k.brokers, "brokers", brokersDefault, "Kafka bootstrap brokers, host:port[,host:port...]")
	fs.StringVar(&k.prefix, "topic-prefix", "", "prefix of every topic and group name")
	fs.IntVar(&k.partitions, "partitions", 8, "partitions of the topics ivrsched creates (all co-partitioned)")
	fs.IntVar(&k.replication, "replication", 1, "replication factor of the topics ivrsched creates")
	fs.DurationVar(&k.timeout, "timeout", 10*time.Second, "how long to try to reach the brokers")
	fs.DurationVar(&k.flush, "flush", time.Millisecond, "producer flush frequency: the most a message waits to be batched")
	fs.DurationVar(&k.fetchWait, "fetch-wait", kafkaclient.DefaultFetchWait, "how long the broker may hold a consumer's fetch while nothing is there, 1ms to 1s (0: 500ms); a fetch returns as soon as a record arrives, so a longer wait costs no latency and an idle consumer fetches once per wait")
	fs.Var(&k.bgFetchWait, "background-fetch-wait", "deprecated, no effect: every consumer fetches with --fetch-wait (still accepted: 0 or 1ms to 1s)")
	fs.StringVar(&k.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	k.security.register(fs)
}

func (k *kafkaFlags) kafka(clientID string) (kafkaclient.Kafka, error) {
	var brokers []string
	for _, b := range strings.Split(k.brokers, ",") {
		b = strings.TrimSpace(b)
		if b == "" {
			continue
		}
		if err := checkHostPort(b); err != nil {
			return kafkaclient.Kafka{}, badFlag("brokers", "%q is not host:port (%v)", b, err)
		}
		brokers = append(brokers, b)
	}
	switch {
	case len(brokers) == 0:
		return kafkaclient.Kafka{}, badFlag("brokers", "empty; want host:port[,host:port...]")
	case k.partitions < 1 || k.partitions > 10000:
		return kafkaclient.Kafka{}, badFlag("partitions", "%d; want 1 to 10000", k.partitions)
	case k.replication < 1 || k.replication > 32:
		return kafkaclient.Kafka{}, badFlag("replication", "%d; want 1 to 32", k.replication)
	case k.timeout <= 0:
		return kafkaclient.Kafka{}, badFlag("timeout", "%v; want a positive duration like 10s", k.timeout)
	case k.flush < 0:
		return kafkaclient.Kafka{}, badFlag("flush", "%v; want a duration >= 0 like 1ms", k.flush)
	case !kafkaclient.ValidFetchWait(k.fetchWait):
		return kafkaclient.Kafka{}, badFlag("fetch-wait", "%v; want 0 (500ms) or 1ms to 1s", k.fetchWait)
	case !kafkaclient.ValidFetchWait(k.bgFetchWait.d):
		return kafkaclient.Kafka{}, badFlag("background-fetch-wait", "%v; want 0 or 1ms to 1s (deprecated, no effect)", k.bgFetchWait.d)
	}
	sec, err := k.security.security()
	if err != nil {
		return kafkaclient.Kafka{}, err
	}
	return kafkaclient.Kafka{Hasher: topology.Murmur2(), Brokers: brokers, ClientID: clientID, Partitions: k.partitions, Replication: k.replication,
		FlushFrequency: k.flush, FetchWait: k.fetchWait, DialTimeout: k.timeout, Security: sec}, nil
}

func (k *kafkaFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(k.logLevel)); err != nil {
		return nil, badFlag("log-level", "%q; want debug, info, warn or error", k.logLevel)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if k.bgFetchWait.given {
		log.Warn("--background-fetch-wait is deprecated and has no effect: every consumer fetches with --fetch-wait, and a fetch returns as soon as a record arrives", "background_fetch_wait", k.bgFetchWait.d, "fetch_wait", k.fetchWait)
	}
	return log, nil
}

// givenDuration is a duration flag that records whether it was given.
type givenDuration struct {
	d     time.Duration
	given bool
}

func (g *givenDuration) String() string {
	if g == nil || !g.given {
		return ""
	}
	return g.d.String()
}

func (g *givenDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	g.d, g.given = d, true
	return nil
}

func (k *kafkaFlags) topics() topology.Topics { return topology.NewTopics(k.prefix) }

func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not 0-65535", port)
	}
	return nil
}

// timeFlag parses an RFC 3339 time.
func parseTime(name, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, badFlag(name, "%q is not an RFC 3339 time like 2026-12-01T09:30:00Z", v)
	}
	return t, nil
}

// limitFlags are the scheduler's limits on commands. The roles enforce them;
// the producing commands check a command against the same limits (same
// flags, same defaults) before they produce it, so what the CLI accepts the
// scheduler does not dead-letter.
type limitFlags struct {
	maxDelay   time.Duration
	maxPast    time.Duration
	pastDue    string
	maxPayload int
	maxSkew    time.Duration
	maxFollow  int
	maxPending int
	registered bool // commands that schedule nothing (cancel, forget) have no limit flags
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	l.registered = true
	lim := scheduler.DefaultLimits()
	fs.DurationVar(&l.maxDelay, "max-delay", lim.MaxDelay, "longest delay (and furthest due time) a command may ask for")
	fs.DurationVar(&l.maxPast, "max-past", lim.MaxPast, "a due time up to this far in the past fires at once; older ones are handled by --past-due")
	fs.StringVar(&l.pastDue, "past-due", "reject", "what to do with a due time older than --max-past: reject (to the dead-letter topic) or fire")
	fs.IntVar(&l.maxPayload, "max-payload", lim.MaxPayload, "largest follow-up payload, in bytes")
	fs.DurationVar(&l.maxSkew, "max-skew", lim.MaxSkew, "how far a command's requested_at may lie from its record timestamp (the broker's clock)")
	fs.IntVar(&l.maxFollow, "max-follow-ups", lim.MaxFollowUps, "most follow-ups in one onboard command")
	fs.IntVar(&l.maxPending, "max-pending", lim.MaxPending, "most follow-ups pending for one user; an onboard command that would leave more is rejected")
}

func (l *limitFlags) limits() (scheduler.Limits, error) {
	if !l.registered {
		return scheduler.DefaultLimits(), nil
	}
	lim := scheduler.Limits{MaxDelay: l.maxDelay, MaxPast: l.maxPast, MaxPayload: l.maxPayload, MaxSkew: l.maxSkew,
		MaxFollowUps: l.maxFollow, MaxPending: l.maxPending}
	switch {
	case l.maxDelay <= 0:
		return lim, badFlag("max-delay", "%v; want a positive duration like 9600h", l.maxDelay)
	case l.maxPast < 0:
		return lim, badFlag("max-past", "%v; want a duration >= 0 like 24h", l.maxPast)
	case l.maxPayload < 1:
		return lim, badFlag("max-payload", "%d; want a byte count >= 1", l.maxPayload)
	case l.maxSkew < time.Second:
		return lim, badFlag("max-skew", "%v; want a duration >= 1s like 24h", l.maxSkew)
	case l.maxFollow < 1:
		return lim, badFlag("max-follow-ups", "%d; want a count >= 1", l.maxFollow)
	case l.maxPending < l.maxFollow:
		return lim, badFlag("max-pending", "%d; want a count >= --max-follow-ups (%d)", l.maxPending, l.maxFollow)
	}
	switch l.pastDue {
	case "reject":
		lim.PastDue = scheduler.PastDueReject
	case "fire":
		lim.PastDue = scheduler.PastDueFire
	default:
		return lim, badFlag("past-due", "%q; want reject or fire", l.pastDue)
	}
	return lim, nil
}
