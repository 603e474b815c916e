package main

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/ivrsched/ivrsched/internal/admin"
)

func cmdExplain(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("explain", "Prints why a user was called when, or not at all: each follow-up of the user, in\n"+
		"order, from its request through each move of its effective time (with the rule\n"+
		"that moved it: window, blackout, spread, cap, paused, a new policy version), its\n"+
		"fire (call id, lateness), placement (provider call id), every status, retries and\n"+
		"the final outcome, suppression, erasure and rejections; times in UTC and in the\n"+
		"user's zone. It reads only the user's partition of onboarding, followup-events,\n"+
		"ivr-calls, ivr-results and the dead-letter topics, from --since on, and asks the\n"+
		"instances owning the user for what is pending now (with the admin token; without\n"+
		"it, that part is left out and said so). No phone number is printed.")
	var k kafkaFlags
	k.register(fs, defaultBrokers)
	user := fs.String("user", "", "user id (required)")
	task := fs.String("task", "", "only this follow-up (task id)")
	since := fs.String("since", "7d", "how far back to read: a duration such as 24h or 7d (at most 30d), or an RFC 3339 time")
	asJSON := fs.Bool("json", false, "print the trail as JSON (as the admin API's /api/explain does)")
	var inst instanceFlags
	inst.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := requireUser(*user); err != nil {
		return err
	}
	now := time.Now()
	from, err := admin.ParseSince(*since, now)
	if err != nil {
		return badFlag("since", "%v", err)
	}
	c, err := instancesClient(&k, inst)
	if err != nil {
		return err
	}
	prog := newProgress("explain")
	tr, err := c.Explain(ctx, *user, from, now, func(read, total int64) { prog.update(read, total, "records read") })
	prog.done()
	if err != nil {
		return err
	}
	if *task != "" {
		tr = tr.Filter(*task)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(tr, "", "  ")
		_, err := stdout.Write(append(b, '\n'))
		return err
	}
	return tr.WriteText(stdout)
}
