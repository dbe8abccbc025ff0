package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// addSinceFlags adds the flags of `replay --since`.
func addSinceFlags(fs *pflag.FlagSet) {
	fs.String("since", "", "re-send rows created at or after this time (RFC 3339, or a duration before now such as 2h): delivered, failed and parked ones")
	fs.String("until", "", "with --since: only rows created before this time (RFC 3339 or a duration before now)")
	fs.String("aggregate-type", "", "with --since: only rows of this aggregate type")
	fs.String("event-type", "", "with --since: only rows of this event type")
	// replay defines --pipeline itself (empty by default, see sinceRequest).
}

// parseWhen reads an RFC 3339 time, or a duration before now.
func parseWhen(flag, v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usageError{fmt.Errorf("--%s %q: use an RFC 3339 time such as 2026-03-03T10:00:00Z, or a duration before now such as 2h", flag, v)}
}

func sinceRequest(fs *pflag.FlagSet, now time.Time) (control.SinceRequest, error) {
	var req control.SinceRequest
	var err error
	// replay's --pipeline defaults to empty (for parked replays it means "the only one with
	// parked aggregates"); a replay since a time goes to the default pipeline unless named.
	if req.Pipeline, _ = fs.GetString("pipeline"); req.Pipeline == "" {
		req.Pipeline = publisher.DefaultPipeline
	}
	since, _ := fs.GetString("since")
	if req.Since, err = parseWhen("since", since, now); err != nil {
		return req, err
	}
	if until, _ := fs.GetString("until"); until != "" {
		if req.Until, err = parseWhen("until", until, now); err != nil {
			return req, err
		}
		if !req.Until.After(req.Since) {
			return req, usageError{fmt.Errorf("--until %s is not after --since %s", req.Until.Format(time.RFC3339), req.Since.Format(time.RFC3339))}
		}
	}
	req.AggregateType, _ = fs.GetString("aggregate-type")
	req.EventType, _ = fs.GetString("event-type")
	return req, nil
}

func runReplaySince(cmd *cobra.Command, fs *pflag.FlagSet, dsn string) error {
	for _, f := range []string{"all", "aggregate", "event"} {
		if fs.Changed(f) {
			return usageError{fmt.Errorf("--since and --%s do not go together: --since re-sends a time range, --%s parked aggregates", f, f)}
		}
	}
	req, err := sinceRequest(fs, time.Now())
	if err != nil {
		return err
	}
	conn, s, err := connectSchema(cmd.Context(), fs, dsn, "")
	if err != nil {
		return err
	}
	defer conn.Close(cmd.Context())
	req.Schema = s
	var sub *endpointShare // with --endpoint: what its subscription takes of the range
	if fs.Changed("endpoint") {
		var e endpoints.Endpoint
		if req.Pipeline, e, err = endpointLane(cmd.Context(), conn, fs, s, cmd.ErrOrStderr()); err != nil {
			return err
		}
		r := state.ReplayRange{Since: req.Since, Until: req.Until, AggregateType: req.AggregateType, EventType: req.EventType}
		sub = &endpointShare{subscription: subscription(e)}
		if sub.Events, sub.Pending, err = subscribedInRange(cmd.Context(), conn, s, r, e); err != nil {
			return err
		}
	} else if err := notAnEndpointPipeline(cmd.Context(), conn, s, req.Pipeline); err != nil {
		return err
	}
	dry, _ := fs.GetBool("dry-run")
	plan, err := control.RequestReplaySince(cmd.Context(), conn, req, dry)
	if err != nil {
		return err
	}
	asJSON, _ := fs.GetBool("json")
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		doc := map[string]any{"dry_run": dry, "since": req.Since, "until": req.Until, "plan": plan, "pruned": plan.Pruned(req.Since)}
		if p, id := laneEndpoint(req.Pipeline); id != "" {
			doc["pipeline"], doc["endpoint"] = p, id
			doc["endpoint_events"] = sub.Events + sub.Pending
		}
		return enc.Encode(doc)
	}
	printSince(cmd.OutOrStdout(), req, plan, sub, dry)
	return nil
}

// endpointShare is what an endpoint's subscription takes of a replay --since range: the rows it
// will be sent (Events delivered, dead-lettered or parked; Pending not delivered yet).
type endpointShare struct {
	subscription    string
	Events, Pending int64
}

func printSince(w io.Writer, req control.SinceRequest, plan control.SincePlan, sub *endpointShare, dry bool) {
	until := "now"
	if !req.Until.IsZero() {
		until = clock(req.Until)
	}
	if p, id := laneEndpoint(req.Pipeline); id != "" {
		fmt.Fprintf(w, "endpoint %s of pipeline %s, rows created from %s to %s; the range, every tenant and type:\n",
			id, p, clock(req.Since), until)
	} else {
		fmt.Fprintf(w, "pipeline %s, rows created from %s to %s\n", req.Pipeline, clock(req.Since), until)
	}
	for _, c := range plan.ByType {
		fmt.Fprintf(w, "  %-24s %d events\n", c.AggregateType, c.Events)
	}
	if plan.First != nil {
		fmt.Fprintf(w, "matching rows created %s .. %s\n", clock(*plan.First), clock(*plan.Last))
	}
	if plan.Pruned(req.Since) {
		oldest := "the table is empty"
		if plan.OldestRow != nil {
			oldest = "the oldest row left was created " + clock(*plan.OldestRow)
		}
		fmt.Fprintf(w, "note: %s; rows before it were pruned (prune, --retention) and cannot be re-sent\n", oldest)
	}
	if plan.Pending > 0 {
		fmt.Fprintf(w, "note: %d rows of the range are not delivered yet: they go out first, as usual, and again with the replay\n", plan.Pending)
	}
	total := plan.Events + plan.Pending
	if sub != nil && total > 0 {
		_, id := laneEndpoint(req.Pipeline)
		printEndpointShare(w, id, plan, *sub, dry)
		return
	}
	switch {
	case total == 0:
		fmt.Fprintln(w, "nothing to replay: no row matches")
	case dry:
		fmt.Fprintf(w, "dry run: would re-send %d events\n", total)
	default:
		fmt.Fprintf(w, "replay %d requested: %d events; the relay re-sends them in order, with their original ids "+
			"and sequences, ahead of anything committed later (outbox-relay status shows the progress)\n", plan.ID, total)
	}
}

// printEndpointShare ends the plan of a replay --since to one endpoint: how many of the range's
// rows its subscription takes, which is what it will receive.
func printEndpointShare(w io.Writer, id string, plan control.SincePlan, sub endpointShare, dry bool) {
	n, total := sub.Events+sub.Pending, plan.Events+plan.Pending
	fmt.Fprintf(w, "endpoint %s takes %d of these %d events (%s)\n", id, n, total, sub.subscription)
	switch {
	case dry && n == 0:
		fmt.Fprintf(w, "dry run: would re-send nothing to %s: none of the range is in its subscription\n", id)
	case dry:
		fmt.Fprintf(w, "dry run: would re-send %d events to %s\n", n, id)
	default:
		fmt.Fprintf(w, "replay %d requested: %d events to %s; the relay reads the %d rows of the range in order and "+
			"re-sends those, with their original ids and sequences, ahead of anything committed later "+
			"(outbox-relay status shows the progress over the range)\n", plan.ID, n, id, total)
	}
}
