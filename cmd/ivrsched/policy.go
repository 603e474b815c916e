package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/lovoo/goka"
	gokacodec "github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"

	"github.com/ivrsched/ivrsched/policy"
	"github.com/ivrsched/ivrsched/topology"
)

const policyUsage = "usage: ivrsched policy set -f FILE | ivrsched policy show  (see --help of each)"

// cmdPolicy sets or shows the calling policy, the one value of the
// ivr-policies topic that every scheduler instance reads.
func cmdPolicy(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"want a subcommand; " + policyUsage}
	}
	switch args[0] {
	case "set":
		return cmdPolicySet(ctx, args[1:], stdout)
	case "show":
		return cmdPolicyShow(ctx, args[1:], stdout)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, policyUsage)
		return nil
	}
	return usageError{fmt.Sprintf("unknown subcommand %q; %s", args[0], policyUsage)}
}

func cmdPolicySet(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("policy set", "Validates a calling policy (YAML or JSON; docs/design.md, \"The calling policy\") and\n"+
		"writes it to the ivr-policies topic. Every scheduler instance applies it at once to\n"+
		"what it schedules, and to pending follow-ups when they come due. Prints the policy\n"+
		"as stored, with its version.")
	var k kafkaFlags
	k.register(fs, defaultBrokers)
	file := fs.String("f", "", "the policy document, YAML or JSON (required; - reads standard input)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var doc []byte
	var err error
	switch *file {
	case "":
		return badFlag("f", "required; want the policy file, like testdata/policy.yaml")
	case "-":
		doc, err = io.ReadAll(os.Stdin)
	default:
		doc, err = os.ReadFile(*file)
	}
	if err != nil {
		return badFlag("f", "%v", err)
	}
	p, err := policy.Parse(doc)
	if err != nil {
		return usageError{fmt.Sprintf("%s: %v", *file, err)}
	}
	cfg, err := k.kafka("ivrsched-cli")
	if err != nil {
		return err
	}
	if err := writePolicy(ctx, cfg, k.topics(), p); err != nil {
		return err
	}
	return printPolicy(stdout, p, "set")
}

func cmdPolicyShow(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("policy show", "Prints the calling policy in the ivr-policies topic, as stored (a valid policy\n"+
		"document: policy set -f accepts it back), with its version.")
	var k kafkaFlags
	k.register(fs, defaultBrokers)
	if err := parse(fs, args); err != nil {
		return err
	}
	cfg, err := k.kafka("ivrsched-cli")
	if err != nil {
		return err
	}
	topic := k.topics().Policies
	raw, err := storedPolicy(ctx, cfg, topic)
	if err != nil {
		return err
	}
	if raw == nil {
		return printPolicy(stdout, nil, "")
	}
	p, err := policy.Decode(raw)
	if err != nil {
		return fmt.Errorf("%s holds a policy that does not parse (the schedulers keep the one before it): %w", topic, err)
	}
	return printPolicy(stdout, p, "in force")
}

// writePolicy writes p to the policy topic, creating it if need be.
func writePolicy(ctx context.Context, cfg topology.Kafka, topics topology.Topics, p *policy.Policy) error {
	topic := topics.Policies
	if err := topology.EnsureTopics(ctx, cfg, []topology.TopicSpec{policySpec(topics)}); err != nil {
		return fmt.Errorf("topic %s: %w", topic, err)
	}
	em, err := goka.NewEmitter(cfg.Brokers, goka.Stream(topic), new(gokacodec.Bytes), cfg.EmitterOptions()...)
	if err != nil {
		return fmt.Errorf("produce to %s: %w", topic, err)
	}
	err = em.EmitSync(policy.Key, p.Encode())
	if ferr := em.Finish(); err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("produce to %s: %w", topic, err)
	}
	return nil
}

// storedPolicy returns the stored policy's bytes; nil when none is set (or
// the topic does not exist yet).
func storedPolicy(ctx context.Context, cfg topology.Kafka, topic goka.Table) ([]byte, error) {
	client, err := cfg.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	topics, err := client.Topics()
	client.Close()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	if !slices.Contains(topics, string(topic)) {
		return nil, nil
	}
	return readPolicy(ctx, cfg, topic)
}

// readPolicy reads the topic to its end with a view and returns the
// policy's stored bytes, nil when none is set.
func readPolicy(ctx context.Context, cfg topology.Kafka, topic goka.Table) ([]byte, error) {
	opts := append(cfg.ViewOptions(), goka.WithViewStorageBuilder(storage.MemoryBuilder()), goka.WithViewLogger(quietLogger{}))
	v, err := goka.NewView(cfg.Brokers, topic, new(gokacodec.Bytes), opts...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx) }()
	select {
	case <-v.WaitRunning():
	case err := <-done:
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	val, err := v.Get(policy.Key)
	cancel()
	<-done
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topic, err)
	}
	b, _ := val.([]byte)
	return b, nil
}

// printPolicy writes the policy as stored, indented, after a comment line
// with its version (the output is YAML, so `policy set -f` reads it back).
// A nil policy: none is set.
func printPolicy(w io.Writer, p *policy.Policy, state string) error {
	if p == nil {
		fmt.Fprintln(w, "# no policy set: a scheduler applies its --default-policy (window: 08:00-21:00 in the user's local time, every day; or none)")
		p = policy.Default()
		state = "default"
	}
	var b bytes.Buffer
	if err := json.Indent(&b, p.Encode(), "", "  "); err != nil {
		return err
	}
	fmt.Fprintf(w, "# policy %s, version %s\n%s\n", state, p.Version(), b.String())
	return nil
}

func policySpec(t topology.Topics) topology.TopicSpec {
	for _, s := range t.Specs() {
		if s.Name == string(t.Policies) {
			return s
		}
	}
	panic("topology: no spec for the policy topic")
}

// quietLogger drops Goka's log lines (a CLI prints its answer only).
type quietLogger struct{}

func (quietLogger) Print(...any)          {}
func (quietLogger) Println(...any)        {}
func (quietLogger) Printf(string, ...any) {}
