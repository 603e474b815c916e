package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ivrsched/ivrsched/admin"
	"github.com/ivrsched/ivrsched/internal/redact"
	"github.com/ivrsched/ivrsched/topology"
)

// instances finds the instances of group that own partitions of topic,
// through the group's member metadata (package admin), and the number of
// partitions of topic.
func instances(ctx context.Context, k *kafkaFlags, group, topic string) ([]admin.Instance, []int32, int32, error) {
	cfg, err := k.kafka("ivrsched-admin")
	if err != nil {
		return nil, nil, 0, err
	}
	client, err := cfg.Connect(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	found, unannounced, err := admin.Discover(client, group, topic)
	if err != nil {
		return nil, nil, 0, err
	}
	owned := map[int32]bool{}
	for _, in := range found {
		for _, p := range in.Partitions {
			owned[p] = true
		}
	}
	var missing []int32
	for _, p := range parts {
		if !owned[p] {
			missing = append(missing, p)
		}
	}
	if len(unannounced) > 0 {
		fmt.Fprintf(os.Stderr, "ivrsched: partitions %v of %s are owned by instances without a web server (--http): not shown\n", unannounced, group)
	}
	return found, missing, int32(len(parts)), nil
}

var adminHTTP = &http.Client{Timeout: 10 * time.Second}

func getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := adminHTTP.Do(req)
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("admin API %s: %s: %s", u, resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("admin API %s: %w", u, err)
	}
	return nil
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
	if err := parse(fs, args); err != nil {
		return err
	}
	if *user == "" {
		return badFlag("user", "required; want a user id")
	}
	t := k.topics()
	out := map[string]any{"user_id": *user}
	for _, side := range []struct {
		name, group, topic string
	}{{"scheduler", string(t.Scheduler), string(t.Onboarding)}, {"dialer", string(t.Dialer), string(t.Calls)}} {
		found, _, n, err := instances(ctx, &k, side.group, side.topic)
		if err != nil {
			return err
		}
		part := topology.Partition(*user, n)
		out["partition"] = part
		in, ok := admin.Owner(found, part)
		if !ok {
			out[side.name] = fmt.Sprintf("no instance with a web server owns partition %d of %s", part, side.group)
			continue
		}
		var u admin.User
		if err := getJSON(ctx, in.URL+"/admin/user/"+url.PathEscape(*user), &u); err != nil {
			return err
		}
		raw := u.Scheduler
		if side.name == "dialer" {
			raw = u.Dialer
		}
		var v any
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &v); err != nil {
				return fmt.Errorf("admin API %s: %w", in.URL, err)
			}
		}
		if !*showPhone {
			v = maskPhones(v)
		}
		out[side.name] = v
		out[side.name+"_instance"] = in.URL
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
		"progress on a terminal.")
	var k kafkaFlags
	k.register(fs, defaultBrokers)
	from := fs.String("from", "", "only follow-ups due at or after this RFC 3339 time (default: all pending)")
	to := fs.String("to", "", "only follow-ups due at or before this RFC 3339 time")
	campaign := fs.String("campaign", "", "only follow-ups of this campaign")
	limit := fs.Int("limit", 20, "how many follow-ups, 1 to 10000")
	if err := parse(fs, args); err != nil {
		return err
	}
	q := url.Values{}
	for _, f := range []struct{ name, v string }{{"from", *from}, {"to", *to}} {
		if f.v != "" {
			if _, err := parseTime(f.name, f.v); err != nil {
				return err
			}
			q.Set(f.name, f.v)
		}
	}
	if *limit < 1 || *limit > 10000 {
		return badFlag("limit", "%d; want 1 to 10000", *limit)
	}
	q.Set("limit", strconv.Itoa(*limit))
	if *campaign != "" {
		q.Set("campaign", *campaign)
	}
	t := k.topics()
	found, missing, n, err := instances(ctx, &k, string(t.Scheduler), string(t.Onboarding))
	if err != nil {
		return err
	}
	prog := newProgress("upcoming")
	var all []admin.Upcoming
	var answered int64
	for i, in := range found {
		var page admin.UpcomingPage
		if err := getJSON(ctx, in.URL+"/admin/upcoming?"+q.Encode(), &page); err != nil {
			return err
		}
		all = append(all, page.Upcoming...)
		answered += int64(len(page.Partitions))
		prog.update(answered, int64(n), fmt.Sprintf("partitions, %d of %d instances", i+1, len(found)))
	}
	prog.done()
	slices.SortStableFunc(all, func(a, b admin.Upcoming) int {
		if c := a.DueAt.Compare(b.DueAt); c != 0 {
			return c
		}
		return strings.Compare(a.UserID+"\x00"+a.TaskID, b.UserID+"\x00"+b.TaskID)
	})
	if len(all) > *limit {
		all = all[:*limit]
	}
	enc := json.NewEncoder(stdout)
	for _, u := range all {
		if err := enc.Encode(u); err != nil {
			return err
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "ivrsched upcoming: partitions %v have no instance that answered (rebalancing, or no --http): their follow-ups are missing\n", missing)
	}
	return nil
}
