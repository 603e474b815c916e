package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/ivrsched/ivrsched/internal/policy"
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
	fs := newFlagSet("policy set", "Validates a calling policy (YAML or JSON; docs/policy.md) and\n"+
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
	c, err := adminClient(&k)
	if err != nil {
		return err
	}
	if err := c.WritePolicy(ctx, p); err != nil {
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
	c, err := adminClient(&k)
	if err != nil {
		return err
	}
	raw, err := c.StoredPolicy(ctx)
	if err != nil {
		return err
	}
	if raw == nil {
		return printPolicy(stdout, nil, "")
	}
	topic := k.topics().Policies
	p, err := policy.Decode(raw)
	if err != nil {
		return fmt.Errorf("%s holds a policy that does not parse (the schedulers keep the one before it): %w", topic, err)
	}
	return printPolicy(stdout, p, "in force")
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
