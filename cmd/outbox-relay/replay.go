package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/controlmsg"
)

func newReplayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Re-send dead-lettered events (and unpark their aggregates), or everything since a time, in order",
		Long: `Re-sends the failed and parked events of the chosen parked aggregates, in their original
commit order and with their original event ids (so an inbox deduplicates them), then unparks the
aggregates. The request is written into the WAL, so the running relay meets it in commit order:
events of the aggregate committed later are delivered after the replay. Needs a relay running
(now or later) on the slot.

With --since, it re-sends every row created in the time range that was delivered, dead-lettered or
parked (for a consumer that lost data), in the original commit order per aggregate and with the
original ids and X-Event-Sequence, ahead of everything committed after the request; the relay reads
them page by page, and resumes after a restart.

With --endpoint ID (a pipeline run with endpoints), it replays that endpoint's own parked
aggregates (all of them unless --aggregate or --event narrows it), or with --since re-sends the
range to that endpoint only, within its current subscription; other endpoints receive nothing.
The endpoint's lane in pipeline P is P/ID, the name its dead letters are recorded under.`,
		Example: `  outbox-relay replay --aggregate order/42 --dry-run
  outbox-relay replay --all
  outbox-relay replay --endpoint acme --dry-run
  outbox-relay replay --since 6h --endpoint acme --pipeline partners
  outbox-relay replay --since 2026-03-03T10:00:00Z --dry-run
  outbox-relay replay --since 2h --aggregate-type order`,
	}
	fs := cmd.Flags()
	addDSNFlag(fs)
	addSchemaFlag(fs)
	fs.Bool("all", false, "replay every parked aggregate")
	fs.StringArray("aggregate", nil, "replay this aggregate, as TYPE/ID (repeatable)")
	fs.String("event", "", "replay the aggregate of this failed or parked event id")
	fs.Bool("dry-run", false, "list what would be re-sent, and send nothing")
	fs.Bool("json", false, "print the plan as JSON")
	fs.String("pipeline", "", "the pipeline whose parked aggregates are replayed; required when several pipelines have some "+
		"(with --endpoint: when several run with endpoints)")
	fs.String("endpoint", "", "replay to this endpoint only (its id): its parked aggregates, or with --since the range")
	addSinceFlags(fs) // since.go
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		dsn, err := requireDSN(fs)
		if err != nil {
			return err
		}
		if fs.Changed("since") {
			return runReplaySince(cmd, fs, dsn)
		}
		for _, f := range []string{"until", "aggregate-type", "event-type"} {
			if fs.Changed(f) {
				return usageError{fmt.Errorf("--%s goes with --since", f)}
			}
		}
		sel, err := replaySelection(fs)
		if err != nil {
			return err
		}
		conn, s, err := connectSchema(cmd.Context(), fs, dsn, "")
		if err != nil {
			return err
		}
		defer conn.Close(cmd.Context())
		sel.Schema = s
		if fs.Changed("endpoint") {
			if sel.Pipeline, _, err = endpointLane(cmd.Context(), conn, fs, s, cmd.ErrOrStderr()); err != nil {
				return err
			}
		}
		dry, _ := fs.GetBool("dry-run")
		plans, err := control.RequestReplay(cmd.Context(), conn, sel, dry)
		if errors.Is(err, control.ErrNothingToReplay) && (dry || sel.All) {
			// Nothing parked is a healthy state, not a failure: an empty plan, exit 0. A named
			// aggregate or event that is not parked stays an error (a typo is likely).
			plans, err = []control.ReplayPlan{}, nil
		}
		if errors.Is(err, control.ErrPipelineNeeded) {
			hint := "with --pipeline NAME"
			if strings.Contains(err.Error(), "/") { // pipeline names have none: P/ID is endpoint ID's lane in P
				hint += ", or for an endpoint's (P/ID) with --endpoint ID --pipeline P"
			}
			return usageError{fmt.Errorf("%w %s", err, hint)}
		}
		if err != nil {
			return err
		}
		asJSON, _ := fs.GetBool("json")
		if fs.Changed("endpoint") {
			return printEndpointReplay(cmd.OutOrStdout(), sel.Pipeline, plans, dry, asJSON)
		}
		return printReplay(cmd.OutOrStdout(), plans, dry, asJSON)
	}
	return cmd
}

func replaySelection(fs *pflag.FlagSet) (control.ReplaySelection, error) {
	var sel control.ReplaySelection
	sel.All, _ = fs.GetBool("all")
	sel.EventID, _ = fs.GetString("event")
	sel.Pipeline, _ = fs.GetString("pipeline")
	aggs, _ := fs.GetStringArray("aggregate")
	for _, a := range aggs {
		typ, id, ok := strings.Cut(a, "/")
		if !ok || typ == "" || id == "" {
			return sel, usageError{fmt.Errorf("--aggregate %q: use TYPE/ID, e.g. order/42", a)}
		}
		sel.Aggregates = append(sel.Aggregates, controlmsg.Aggregate{Type: typ, ID: id})
	}
	if !sel.All && sel.EventID == "" && len(sel.Aggregates) == 0 && fs.Changed("endpoint") {
		sel.All = true // an endpoint's parked aggregates, all of them
	}
	if id, _ := fs.GetString("endpoint"); fs.Changed("endpoint") && id == "" {
		return sel, usageError{errors.New("--endpoint needs the endpoint's id (`outbox-relay endpoint list` lists them)")}
	}
	if !sel.All && sel.EventID == "" && len(sel.Aggregates) == 0 {
		return sel, usageError{errors.New("choose what to replay: --all, --aggregate TYPE/ID, --event ID, --endpoint ID or --since TIME")}
	}
	return sel, nil
}

// printEndpointReplay prints a replay of an endpoint's parked aggregates: which endpoint and
// pipeline, then the plan as printReplay does.
func printEndpointReplay(w io.Writer, lane string, plans []control.ReplayPlan, dry, asJSON bool) error {
	p, id := laneEndpoint(lane)
	if asJSON {
		return printJSON(w, map[string]any{"dry_run": dry, "pipeline": p, "endpoint": id, "aggregates": plans})
	}
	fmt.Fprintf(w, "endpoint %s of pipeline %s\n", id, p)
	return printReplay(w, plans, dry, false)
}

func printReplay(w io.Writer, plans []control.ReplayPlan, dry, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"dry_run": dry, "aggregates": plans})
	}
	events := 0
	for _, p := range plans {
		fmt.Fprintf(w, "%s/%s (parked: %s)\n", p.Aggregate.Type, p.Aggregate.ID, p.Reason)
		for _, e := range p.Events {
			fmt.Fprintf(w, "  %s  %-7s  %s\n", e.ID, e.Status, e.EventType)
		}
		events += len(p.Events)
	}
	if len(plans) == 0 {
		fmt.Fprintln(w, "nothing to replay: no parked aggregate matches")
		return nil
	}
	if dry {
		fmt.Fprintf(w, "dry run: would re-send %d events of %d aggregates\n", events, len(plans))
		return nil
	}
	fmt.Fprintf(w, "replay requested: %d events of %d aggregates; the relay re-sends them in order, then unparks them\n",
		events, len(plans))
	return nil
}
