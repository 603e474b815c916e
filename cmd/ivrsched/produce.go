package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/lovoo/goka"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/ivrsched/ivrsched/codec"
	pb "github.com/ivrsched/ivrsched/codec/ivrschedpb"
	"github.com/ivrsched/ivrsched/processors/scheduler"
)

// whenFlags are --delay and --at.
type whenFlags struct {
	delay time.Duration
	at    string
}

func (w *whenFlags) register(fs *flag.FlagSet, what string) {
	fs.DurationVar(&w.delay, "delay", 0, "delay of the "+what+" from now, like 90s or 48h")
	fs.StringVar(&w.at, "at", "", "due time of the "+what+" (RFC 3339, like 2026-12-01T09:30:00Z); instead of --delay")
}

func (w *whenFlags) set(fs *flag.FlagSet) (delay *durationpb.Duration, at *timestamppb.Timestamp, err error) {
	delaySet, atSet := isSet(fs, "delay"), w.at != ""
	switch {
	case delaySet && atSet:
		return nil, nil, badFlag("at", "give --delay or --at, not both")
	case delaySet && w.delay < 0:
		return nil, nil, badFlag("delay", "%v; want a duration >= 0 like 90s", w.delay)
	case delaySet:
		return durationpb.New(w.delay), nil, nil
	case atSet:
		t, err := parseTime("at", w.at)
		if err != nil {
			return nil, nil, err
		}
		return nil, timestamppb.New(t), nil
	}
	return nil, nil, nil
}

// commandFlags are the flags every producing command has: the cluster and
// the user the command is for.
type commandFlags struct {
	kafkaFlags
	limits limitFlags
	user   string
}

func (c *commandFlags) register(fs *flag.FlagSet) {
	c.kafkaFlags.register(fs, defaultBrokers)
	fs.StringVar(&c.user, "user", "", "user id (required); the record key")
}

// parse parses args and checks that --user is given.
func (c *commandFlags) parse(fs *flag.FlagSet, args []string) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	return requireUser(c.user)
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func cmdOnboard(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("onboard", "Produces an onboarding event: the user gets a follow-up call after --delay (or at --at).\nWithout either, the scheduler's default follow-up applies.")
	var c commandFlags
	c.register(fs)
	c.limits.register(fs)
	phone := fs.String("phone", "", "phone number in E.164, like +14155550123 (required)")
	tz := fs.String("tz", "", "the user's IANA time zone, like America/New_York")
	task := fs.String("task", "", "task id of the follow-up (default followup-1)")
	script := fs.String("script", "welcome", "IVR script of the call")
	campaign := fs.String("campaign", "", "campaign id of the call")
	payload := fs.String("payload", "", "opaque payload handed to the provider")
	var w whenFlags
	w.register(fs, "follow-up")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	if *phone == "" {
		return badFlag("phone", "required; want E.164 like +14155550123")
	}
	delay, at, err := w.set(fs)
	if err != nil {
		return err
	}
	ob := &pb.Onboard{Phone: *phone, TimeZone: *tz, OnboardedAt: timestamppb.Now()}
	if delay != nil || at != nil || *task != "" || *payload != "" || *campaign != "" {
		f := &pb.FollowUp{TaskId: *task, Action: &pb.Action{IvrScript: *script, CampaignId: *campaign}, Payload: []byte(*payload)}
		switch {
		case delay != nil:
			f.When = &pb.FollowUp_Delay{Delay: delay}
		case at != nil:
			f.When = &pb.FollowUp_DueAt{DueAt: at}
		default:
			return badFlag("delay", "a follow-up with --task, --payload or --campaign needs --delay or --at")
		}
		ob.FollowUps = []*pb.FollowUp{f}
	}
	return produce(ctx, &c, &pb.Command{UserId: c.user, Command: &pb.Command_Onboard{Onboard: ob}}, stdout)
}

func cmdCancel(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("cancel", "Cancels a pending follow-up of a user, or all of them without --task. The outcome\n(cancelled, too late, unknown) is published on the followup-events topic.")
	var c commandFlags
	c.register(fs)
	task := fs.String("task", "", "task id to cancel; empty cancels all of the user's follow-ups")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	return produce(ctx, &c, &pb.Command{UserId: c.user, Command: &pb.Command_Cancel{Cancel: &pb.Cancel{TaskId: *task}}}, stdout)
}

func cmdForget(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("forget", "Erases a user: every pending follow-up is dropped and the user's values are deleted\nfrom the scheduler's and the dialer's tables. KIND_FORGOTTEN is published on\nfollowup-events. docs/design.md says where a phone number can still be found after.")
	var c commandFlags
	c.register(fs)
	if err := c.parse(fs, args); err != nil {
		return err
	}
	return produce(ctx, &c, &pb.Command{UserId: c.user, Command: &pb.Command_Forget{Forget: &pb.Forget{}}}, stdout)
}

func cmdReschedule(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("reschedule", "Moves a pending follow-up to a new due time: --delay from now, or --at.")
	var c commandFlags
	c.register(fs)
	c.limits.register(fs)
	task := fs.String("task", "", "task id to move (required)")
	var w whenFlags
	w.register(fs, "follow-up")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	if *task == "" {
		return badFlag("task", "required; want the task id of a pending follow-up")
	}
	delay, at, err := w.set(fs)
	if err != nil {
		return err
	}
	r := &pb.Reschedule{TaskId: *task}
	switch {
	case delay != nil:
		r.When = &pb.Reschedule_Delay{Delay: delay}
	case at != nil:
		r.When = &pb.Reschedule_DueAt{DueAt: at}
	default:
		return badFlag("delay", "required; give --delay or --at")
	}
	return produce(ctx, &c, &pb.Command{UserId: c.user, Command: &pb.Command_Reschedule{Reschedule: r}}, stdout)
}

// produce validates cmd as the scheduler would and writes it to the
// onboarding topic, waiting for the broker's acknowledgement.
func produce(ctx context.Context, c *commandFlags, cmd *pb.Command, stdout io.Writer) error {
	lim, err := c.limits.limits()
	if err != nil {
		return err
	}
	now := time.Now()
	cmd.RequestedAt = timestamppb.New(now)
	if _, _, err := scheduler.Validate(cmd.GetUserId(), cmd, now, lim); err != nil {
		return usageError{err.Error()}
	}
	k := &c.kafkaFlags
	cfg, err := k.kafka("ivrsched-cli")
	if err != nil {
		return err
	}
	topic := k.topics().Onboarding
	// Fail within --timeout, naming the brokers, if none answers.
	client, err := cfg.Connect(ctx)
	if err != nil {
		return fmt.Errorf("produce to %s: %w", topic, err)
	}
	client.Close()
	em, err := goka.NewEmitter(cfg.Brokers, topic, new(codec.Command), cfg.EmitterOptions()...)
	if err != nil {
		return fmt.Errorf("produce to %s: %w", topic, err)
	}
	err = em.EmitSync(cmd.GetUserId(), cmd)
	if ferr := em.Finish(); err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("produce to %s: %w", topic, err)
	}
	fmt.Fprintln(stdout, codec.JSON(cmd))
	return nil
}

func cmdRunNow(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("run-now", "Fires a pending follow-up of a user now, whatever the calling policy says (a command\n"+
		"through the scheduler, reported as KIND_RUN_NOW on followup-events).")
	var c commandFlags
	c.register(fs)
	task := fs.String("task", "", "task id of the pending follow-up (required)")
	if err := c.parse(fs, args); err != nil {
		return err
	}
	if *task == "" {
		return badFlag("task", "required; want the task id of a pending follow-up")
	}
	return produce(ctx, &c, &pb.Command{UserId: c.user, Command: &pb.Command_RunNow{RunNow: &pb.RunNow{TaskId: *task}}}, stdout)
}
