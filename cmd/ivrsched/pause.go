package main

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/ivrsched/ivrsched/internal/admin"
	"github.com/ivrsched/ivrsched/internal/policy"
)

// A pause is part of the calling policy: campaigns.<C>.paused_until in the
// ivr-policies topic, which every scheduler reads. Pause and resume read
// the policy, change that one field and write it back (docs/policy.md,
// "Where the policy lives").

func cmdPause(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("pause", "Pauses a campaign: its follow-ups due before the pause's end are held, not fired, and\n"+
		"go at the end (or at the next opening of the calling window after it, spread like an\n"+
		"opening); 'resume' ends it early, and they go at once (inside the window). None is\n"+
		"skipped. The pause is part of the calling policy (campaigns.<C>.paused_until), which\n"+
		"must be set (policy set -f).")
	var k kafkaFlags
	k.register(fs, defaultBrokers)
	campaign := fs.String("campaign", "", "campaign id (Action.campaign_id) to pause (required)")
	dur := fs.Duration("for", 24*time.Hour, "how long, up to 366 days (8784h)")
	if err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *campaign == "":
		return badFlag("campaign", "required; want a campaign id")
	case *dur <= 0 || *dur > policy.MaxPause:
		return badFlag("for", "%v; want a duration above 0 and at most 8784h", *dur)
	}
	until := time.Now().Add(*dur).UTC().Truncate(time.Second)
	return changePause(ctx, &k, *campaign, &until, stdout)
}

func cmdResume(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("resume", "Ends a campaign's pause: its held follow-ups go at once, or at the next opening of\n"+
		"the calling window (the schedulers' sweep of deferred follow-ups moves them).")
	var k kafkaFlags
	k.register(fs, defaultBrokers)
	campaign := fs.String("campaign", "", "campaign id to resume (required)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *campaign == "" {
		return badFlag("campaign", "required; want a campaign id")
	}
	return changePause(ctx, &k, *campaign, nil, stdout)
}

// changePause sets (until) or removes (nil) the pause of campaign in the
// stored policy and prints the policy written.
func changePause(ctx context.Context, k *kafkaFlags, campaign string, until *time.Time, stdout io.Writer) error {
	c, err := adminClient(k)
	if err != nil {
		return err
	}
	p, err := c.SetPause(ctx, campaign, until)
	switch {
	case errors.Is(err, admin.ErrNoPolicy), errors.Is(err, admin.ErrNotPaused):
		return usageError{err.Error()}
	case err != nil:
		return err
	}
	return printPolicy(stdout, p, "set")
}
