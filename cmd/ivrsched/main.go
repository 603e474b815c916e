// Command ivrsched runs the follow-up call scheduler and talks to it.
//
//	ivrsched run          everything in one process (embedded broker unless --brokers)
//	ivrsched scheduler    the scheduler role against --brokers
//	ivrsched dialer       the dialer role against --brokers
//	ivrsched onboard      produce an onboarding event
//	ivrsched cancel       cancel a user's follow-up (or all of them)
//	ivrsched reschedule   move a follow-up to a new due time
//	ivrsched forget       erase a user (cancel everything, delete their values)
//	ivrsched calls        print ivr-calls as JSON lines
//	ivrsched policy       set or show the calling policy (policy set -f FILE, policy show)
//	ivrsched dlq          list or replay dead letters (dlq list, dlq replay)
//	ivrsched show         a user's follow-ups and recent calls (admin API)
//	ivrsched explain      why a user was called when, or not at all
//	ivrsched upcoming     the next due follow-ups across all partitions (admin API)
//	ivrsched run-now      fire a pending follow-up now
//	ivrsched pause        pause a campaign (resume ends it)
//	ivrsched suppress     the do-not-call list (suppress add|remove|check|list)
//
// Run "ivrsched <command> --help" for the flags of each.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout io.Writer) error
}

var commands = []command{
	{"run", "everything in one process, on an embedded broker unless --brokers is given", cmdRun},
	{"scheduler", "run the scheduler role (several instances share the partitions)", cmdScheduler},
	{"dialer", "run the dialer role (several instances share the partitions)", cmdDialer},
	{"onboard", "produce an onboarding event for a user", cmdOnboard},
	{"cancel", "cancel one follow-up of a user, or all of them", cmdCancel},
	{"reschedule", "move a pending follow-up to a new due time", cmdReschedule},
	{"forget", "erase a user: cancel everything and delete their values from the tables", cmdForget},
	{"calls", "print the calls on ivr-calls as JSON lines", cmdCalls},
	{"policy", "set (policy set -f FILE) or show (policy show) the calling policy of every scheduler", cmdPolicy},
	{"dlq", "list (dlq list) or replay (dlq replay) the dead letters, by reason and time", cmdDLQ},
	{"show", "a user's follow-ups (requested and effective times) and recent calls", cmdShow},
	{"explain", "why a user was called when, or not: each follow-up's decision trail", cmdExplain},
	{"upcoming", "the next due follow-ups across all partitions, from the due indexes", cmdUpcoming},
	{"run-now", "fire a pending follow-up of a user now (a command through the scheduler)", cmdRunNow},
	{"pause", "pause a campaign's calls for --for (part of the calling policy)", cmdPause},
	{"resume", "end a campaign's pause: its held calls go", cmdResume},
	{"suppress", "the do-not-call list by number: suppress add|remove|check|list", cmdSuppress},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ivrsched <command> [flags]\n\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'ivrsched <command> --help' for a command's flags.")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := realMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout)
		var ue usageError
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ue):
			fmt.Fprintf(stderr, "ivrsched %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "ivrsched %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "ivrsched: unknown command %q (want one of run, scheduler, dialer, onboard, cancel, reschedule, forget, calls, policy, dlq, show, explain, upcoming, run-now, pause, resume, suppress)\n", args[0])
	return 2
}
