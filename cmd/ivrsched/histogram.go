package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/ivrsched/ivrsched/internal/admin"
)

// printHistogram prints the upcoming chart's numbers: a header with the
// dialers' capacity (and the held and parked follow-ups, if any), then one
// line an hour with its follow-ups in all, by campaign, and the calls left
// for later hours at that capacity; as one JSON document
// (admin.UpcomingHours) if asJSON.
func printHistogram(ctx context.Context, c *admin.Client, from time.Time, hours int, asJSON bool, stdout io.Writer) error {
	h, err := c.UpcomingHours(ctx, from, hours)
	if err != nil {
		return tokenHint(err)
	}
	if len(h.Missing) > 0 {
		fmt.Fprintf(os.Stderr, "ivrsched upcoming: partitions %v have no instance that answered (rebalancing, or no --admin-http): their follow-ups are missing\n", h.Missing)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(h)
	}
	writeHistogram(stdout, h)
	return nil
}

// writeHistogram writes h as a table.
func writeHistogram(w io.Writer, h admin.UpcomingHours) {
	cps := strconv.FormatFloat(h.CPS, 'f', -1, 64)
	switch {
	case h.Dialers == 0:
		fmt.Fprintln(w, "# capacity: unknown (no dialer instance answered)")
	case h.PerHour == 0:
		fmt.Fprintf(w, "# capacity: no limit (--cps 0; dialer instances: %d)\n", h.Dialers)
	default:
		fmt.Fprintf(w, "# capacity: %s calls an hour (--cps %s; dialer instances: %d)\n", strconv.FormatFloat(h.PerHour, 'f', -1, 64), cps, h.Dialers)
	}
	if h.Truncated {
		fmt.Fprintf(w, "# truncated: an instance counted %d follow-ups; the later hours are short\n", admin.MaxScan)
	}
	if h.Held > 0 {
		fmt.Fprintf(w, "# held: %d of those counted (a wake fires each at its hour)\n", h.Held)
	}
	if h.Parked > 0 {
		fmt.Fprintf(w, "# parked: %d more, due and waiting for the calling policy to move them; in no hour\n", h.Parked)
	}
	campaigns := admin.Campaigns(h.Hours)
	totals := make([]int, len(h.Hours))
	for i, hc := range h.Hours {
		totals[i] = hc.Total
	}
	backlog := admin.Backlog(totals, h.PerHour)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "hour (UTC)\ttotal\twaiting after\t")
	for _, c := range campaigns {
		q := strconv.Quote(c) // a campaign id is a producer's: no terminal controls
		fmt.Fprintf(tw, "%s\t", q[1:len(q)-1])
	}
	fmt.Fprintln(tw)
	for i, hc := range h.Hours {
		fmt.Fprintf(tw, "%s\t%d\t%s\t", hc.Start.UTC().Format("2006-01-02T15:04Z"), hc.Total, strconv.FormatFloat(backlog[i], 'f', -1, 64))
		for _, c := range campaigns {
			fmt.Fprintf(tw, "%d\t", hc.Campaigns[c])
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
