package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/redact"
)

func adminClient(k *kafkaFlags) (*admin.Client, error) {
	cfg, err := k.kafka("ivrsched-admin")
	if err != nil {
		return nil, err
	}
	return &admin.Client{Kafka: cfg, Topics: k.topics()}, nil
}

// instanceFlags are the flags of the commands that ask the instances.
type instanceFlags struct {
	tokenFile string
	networks  string
}

func (f *instanceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.tokenFile, "admin-token-file", "", "a file holding the instances' admin token (default: $"+adminTokenEnv+")")
	registerNetworks(fs, &f.networks)
}

// registerNetworks registers --admin-networks.
func registerNetworks(fs *flag.FlagSet, v *string) {
	fs.StringVar(v, "admin-networks", "", "networks (CIDRs or addresses, comma-separated) in which the instances' announced admin URLs are fetched (default: loopback and the /24, IPv6 /64, of each broker's address)")
}

// adminPeers parses --admin-networks; nil: the default.
func adminPeers(networks string) (*admin.Peers, error) {
	if networks == "" {
		return nil, nil
	}
	p, err := admin.ParsePeers(networks)
	if err != nil {
		return nil, badFlag("admin-networks", "%v", err)
	}
	return &p, nil
}

// instancesClient is the client of the instances' admin API, with the
// admin token of the token file or the environment.
func instancesClient(k *kafkaFlags, f instanceFlags) (*admin.Client, error) {
	c, err := adminClient(k)
	if err != nil {
		return nil, err
	}
	if c.Token, err = adminToken(f.tokenFile, os.Getenv); err != nil {
		return nil, err
	}
	if c.Peers, err = adminPeers(f.networks); err != nil {
		return nil, err
	}
	return c, nil
}

// tokenHint adds to an instance's 401 where the token comes from.
func tokenHint(err error) error {
	if errors.Is(err, admin.ErrUnauthorized) {
		return fmt.Errorf("%w: set $%s or --admin-token-file", err, adminTokenEnv)
	}
	return err
}

func cmdShow(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("show", "Prints a user's follow-ups (requested and effective times, why deferred) and recent\n"+
		"calls as JSON: the scheduler's and the dialer's table values, asked of the instances\n"+
		"that own the user's partition (found through the consumer groups). Phone numbers\n"+
		"are masked unless --show-phone.")
	var k kafkaFlags
	k.register(fs, defaultBrokers)
	user := fs.String("user", "", "user id (required)")
	showPhone := fs.Bool("show-phone", false, "print phone numbers in full")
	var inst instanceFlags
	inst.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := requireUser(*user); err != nil {
		return err
	}
	c, err := instancesClient(&k, inst)
	if err != nil {
		return err
	}
	c.ShowPhones = *showPhone
	v, err := c.User(ctx, *user)
	if err != nil {
		return tokenHint(err)
	}
	out := map[string]any{"user_id": v.UserID, "partition": v.Partition}
	for name, side := range map[string]struct {
		raw             json.RawMessage
		url, unreadable string
	}{"scheduler": {v.Scheduler, v.SchedulerURL, v.SchedulerUnreadable}, "dialer": {v.Dialer, v.DialerURL, v.DialerUnreadable}} {
		if side.url == "" {
			out[name] = fmt.Sprintf("no instance with a web server owns partition %d of the %s's group", v.Partition, name)
			continue
		}
		if side.unreadable != "" {
			out[name], out[name+"_instance"] = side.unreadable+" (kept as it is until a Forget erases the user)", side.url
			continue
		}
		var d any
		if len(side.raw) > 0 {
			if err := json.Unmarshal(side.raw, &d); err != nil {
				return fmt.Errorf("admin API %s: %w", side.url, err)
			}
		}
		if !*showPhone {
			d = maskPhones(d)
		}
		out[name], out[name+"_instance"] = d, side.url
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Fprintln(stdout, string(b))
	return nil
}

// maskPhones masks the values of "phone" fields in decoded JSON.
func maskPhones(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "phone" {
				x[k] = redact.Phone(s)
			} else {
				x[k] = maskPhones(e)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = maskPhones(e)
		}
	}
	return v
}

func cmdUpcoming(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("upcoming", "Prints the next due follow-ups across all partitions as JSON lines, in firing order:\n"+
		"each scheduler instance (found through the consumer group) answers from the due\n"+
		"indexes of the partitions it owns (no table scan); the CLI merges them. Shows\n"+
		"progress on a terminal. With --histogram, prints instead the follow-ups due per hour\n"+
		"(effective times, UTC) by campaign, and the dialers' capacity per hour (--cps × 3600):\n"+
		"what the web page's upcoming chart draws.")
	var k kafkaFlags
	k.register(fs, defaultBrokers)
	from := fs.String("from", "", "only follow-ups due at or after this RFC 3339 time (default: all pending)")
	to := fs.String("to", "", "only follow-ups due at or before this RFC 3339 time")
	campaign := fs.String("campaign", "", "only follow-ups of this campaign")
	limit := fs.Int("limit", 20, "how many follow-ups, 1 to 10000")
	histogram := fs.Bool("histogram", false, "print the follow-ups per hour and campaign from --from (default: now), and the dialers' capacity")
	hours := fs.Int("hours", 48, fmt.Sprintf("with --histogram: how many hours, 1 to %d", admin.MaxHours))
	asJSON := fs.Bool("json", false, "with --histogram: print the admin API's JSON (admin.UpcomingHours) instead of a table")
	var inst instanceFlags
	inst.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	q := admin.UpcomingQuery{Campaign: *campaign, Limit: *limit}
	for _, f := range []struct {
		name, v string
		t       *time.Time
	}{{"from", *from, &q.From}, {"to", *to, &q.To}} {
		if f.v != "" {
			t, err := parseTime(f.name, f.v)
			if err != nil {
				return err
			}
			*f.t = t
		}
	}
	if *limit < 1 || *limit > 10000 {
		return badFlag("limit", "%d; want 1 to 10000", *limit)
	}
	if *histogram {
		if *campaign != "" || *to != "" {
			return badFlag("histogram", "counts every campaign up to --hours; --campaign and --to are not taken with it")
		}
		if *hours < 1 || *hours > admin.MaxHours {
			return badFlag("hours", "%d; want 1 to %d", *hours, admin.MaxHours)
		}
	}
	c, err := instancesClient(&k, inst)
	if err != nil {
		return err
	}
	if *histogram {
		if q.From.IsZero() {
			q.From = time.Now()
		}
		return printHistogram(ctx, c, q.From, *hours, *asJSON, stdout)
	}
	prog := newProgress("upcoming")
	all, cl, err := c.Upcoming(ctx, q, func(answered, of int32) {
		prog.update(int64(answered), int64(of), "partitions answered")
	})
	prog.done()
	if err != nil {
		return tokenHint(err)
	}
	enc := json.NewEncoder(stdout)
	for _, u := range all {
		if err := enc.Encode(u); err != nil {
			return err
		}
	}
	for _, r := range cl.Refused {
		fmt.Fprintf(os.Stderr, "ivrsched upcoming: %q\n", r)
	}
	if len(cl.Missing) > 0 {
		fmt.Fprintf(os.Stderr, "ivrsched upcoming: partitions %v have no instance that answered (rebalancing, or no --admin-http): their follow-ups are missing\n", cl.Missing)
	}
	return nil
}
