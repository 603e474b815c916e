package explain

import (
	"fmt"
	"io"
	"strings"
	"time"
)

const utcLayout = "2006-01-02 15:04:05.000Z"

// WriteText writes the trail for a terminal: a header saying what was
// read, then each follow-up's steps, one a line, with their times in UTC
// and in the user's zone, and where each fact was read.
func (t Trail) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "User %s, partition %d. Local times in %s (%s).\n", t.User, t.Partition, t.Zone, t.ZoneFrom)
	fmt.Fprintf(&b, "Read the user's partition of each topic from %s to %s (records before are not looked at):\n",
		t.Since.Format(time.RFC3339), t.Read.Format(time.RFC3339))
	for _, s := range t.Sources {
		if s.Error != "" {
			fmt.Fprintf(&b, "  %s: %s\n", s.Topic, s.Error)
			continue
		}
		fmt.Fprintf(&b, "  %s/%d offsets %d to %d: %d records, %d of the user\n", s.Topic, s.Partition, s.From, s.To, s.Records, s.User)
	}
	for _, n := range t.Notes {
		fmt.Fprintf(&b, "Note: %s\n", n)
	}
	if len(t.UserSteps) > 0 {
		b.WriteString("\nUser:\n")
		for _, s := range t.UserSteps {
			writeStep(&b, s)
		}
	}
	if len(t.FollowUps) == 0 {
		b.WriteString("\nNo follow-up of the user in the range read, nor pending.\n")
	}
	for _, f := range t.FollowUps {
		fmt.Fprintf(&b, "\nFollow-up %s: %s\n", f.Task, f.Outcome)
		for _, s := range f.Steps {
			writeStep(&b, s)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeStep(b *strings.Builder, s Step) {
	fmt.Fprintf(b, "  %s  %-23s  %s  [%s]\n", s.At.Format(utcLayout), s.AtLocal, s.Line(), s.Source)
}

// when renders an instant in UTC and, if known, local time.
func when(t *time.Time, local string) string {
	if t == nil {
		return "?"
	}
	if local == "" {
		return t.Format(UTCLayout)
	}
	return t.Format(UTCLayout) + " (" + local + ")"
}

// Line is the step in words.
func (s Step) Line() string {
	var l string
	switch s.What {
	case "requested":
		l = "requested for " + when(s.To, s.ToLocal)
	case "moved":
		l = fmt.Sprintf("moved by %s", s.Rule)
		if s.From != nil || s.To != nil {
			l += ": " + when(s.From, s.FromLocal) + " -> " + when(s.To, s.ToLocal)
		}
	case "advanced", "rescheduled", "run-now":
		l = s.What + " to " + when(s.To, s.ToLocal)
	case "fired":
		l = fmt.Sprintf("fired call %s (attempt %d)", s.CallID, s.Attempt)
		if s.To != nil {
			l += ", effective " + when(s.To, s.ToLocal)
		}
		if s.Lateness != nil {
			l += fmt.Sprintf(", %v late", time.Duration(*s.Lateness).Round(time.Microsecond))
		}
	case "placed":
		l = "placed call " + s.CallID
		if s.ProviderCallID != "" {
			l += ", provider call " + s.ProviderCallID
		}
	case "status", "final":
		l = s.What + " " + s.Outcome + " of call " + s.CallID
	case "retry":
		l = "retry after " + s.Outcome + ": next attempt requested for " + when(s.To, s.ToLocal)
	case "answered", "exhausted", "too-old":
		l = "outcome " + s.What
		if s.Outcome != "" && s.Outcome != s.What {
			l += " (" + s.Outcome + ")"
		}
		if s.CallID != "" {
			l += ", call " + s.CallID
		}
	case "pending":
		l = fmt.Sprintf("pending now (attempt %d): fires at %s", s.Attempt, when(s.To, s.ToLocal))
	default:
		l = s.What
		if s.Outcome != "" {
			l += " " + s.Outcome
		}
		if s.CallID != "" {
			l += " (call " + s.CallID + ")"
		}
	}
	if s.Detail != "" {
		l += "; " + s.Detail
	}
	return l
}
