package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// shardLine says how fresh a shard's figures are, and whether its slot is streamed.
func shardLine(sh endpointShard) string {
	line := freshness(sh)
	switch {
	case sh.Streamed == nil:
		return line + "; no slot " + sh.Slot + " (name the pipeline's slot with --config or --slot)"
	case *sh.Streamed:
		return line + "; slot " + sh.Slot + " streamed"
	}
	return line + "; slot " + sh.Slot + " NOT STREAMED"
}

func freshness(sh endpointShard) string {
	switch {
	case sh.ReportedAt == nil:
		return fmt.Sprintf("pipeline %s: no figures yet (its relay writes an endpoint's figures when they change)", sh.Name)
	case sh.Heartbeat && !sh.Stale:
		return fmt.Sprintf("pipeline %s: reported %s ago", sh.Name, age(*sh.AgeSeconds))
	case sh.Heartbeat:
		return fmt.Sprintf("pipeline %s: STALE, last reported %s ago", sh.Name, age(*sh.AgeSeconds))
	}
	return fmt.Sprintf("pipeline %s: figures last changed %s ago (written when they change)", sh.Name, age(*sh.AgeSeconds))
}

// writeEndpointReport prints the summary, the warnings, then one line per endpoint.
func writeEndpointReport(w io.Writer, rep endpointReport) error {
	t := rep.Totals
	fmt.Fprintf(w, "ENDPOINTS  %d enabled, %d paused, %d disabled; %d failing or parked\n",
		t["enabled"], t["paused"], t["disabled"], t["failing"])
	for _, p := range rep.Pipelines {
		for _, sh := range p.Shards {
			fmt.Fprintln(w, shardLine(sh))
		}
	}
	for _, warn := range rep.Warnings {
		fmt.Fprintln(w, "warning: "+warn)
	}
	if len(rep.Endpoints) == 0 {
		_, err := fmt.Fprintln(w, "no endpoints: `outbox-relay endpoint add` adds one")
		return err
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PIPELINE\tENDPOINT\tSTATE\tUNDELIVERED\tOLDEST\tBACKLOG\tLAST SUCCESS\tFAILURES\tPARKED\tLAST ERROR\tAS OF")
	for _, l := range rep.Endpoints {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%d\t%d\t%s\t%s\n", or(l.Pipeline, "-"), l.ID, stateCell(l), l.Undelivered,
			ageCell(l.OldestUndeliveredSeconds, "-", ""), l.Backlog, agoCell(rep.now, l.LastSuccessAt, "never"), l.FailuresInRow,
			l.ParkedAggregates, errorCell(rep.now, l), ageCell(l.ReportedAgeSecond, "never", " ago"))
	}
	return tw.Flush()
}

func stateCell(l endpointStatusLine) string {
	if l.Reason == "" {
		return l.State
	}
	return l.State + ": " + oneLine(l.Reason, 40)
}

func errorCell(now time.Time, l endpointStatusLine) string {
	if l.LastErrorAt == nil {
		return "-"
	}
	return agoCell(now, l.LastErrorAt, "") + ": " + oneLine(l.LastError, 60)
}

func agoCell(now time.Time, t *time.Time, none string) string {
	return ageCell(ageOf(now, t), none, " ago")
}

func ageCell(seconds *float64, none, suffix string) string {
	if seconds == nil {
		return none
	}
	return age(*seconds) + suffix
}

func ageOf(now time.Time, t *time.Time) *float64 {
	if t == nil {
		return nil
	}
	s := max(now.Sub(*t).Seconds(), 0)
	return &s
}
