package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// defaultDeliveriesLimit is how many entries `deliveries --endpoint` lists per page.
const defaultDeliveriesLimit = 100

func newDeliveriesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deliveries",
		Short: "Show the delivery log of endpoints: an event's attempts and delivery, or an endpoint's history",
		Long: `Reads the delivery log the relay keeps for pipelines run with endpoints (docs/guides/endpoints-watching.md):
every failed attempt (time, attempt, HTTP status, latency, the error or the first KB of the answer)
and when each event was delivered, kept for run --delivery-log-retention (7 days by default).

--event ID lists each endpoint the log or a backlog names for the event: its failed attempts,
its delivery, and whether it still waits in the endpoint's backlog.

--endpoint ID lists the endpoint's entries newest first, a page of --limit at a time; the last
line says the --until that shows the next page.`,
		Example: `  outbox-relay deliveries --event 0190f8a2-6c1e-7c3a-9f4e-1d2b3c4d5e6f
  outbox-relay deliveries --endpoint acme --failed --since 2h
  outbox-relay deliveries --endpoint acme --since 2026-03-03T10:00:00Z --until 2026-03-03T11:00:00Z --json`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	addDSNFlag(fs)
	addSchemaFlag(fs)
	fs.String("event", "", "show this event's attempts and delivery, per endpoint (its id)")
	fs.String("endpoint", "", "show this endpoint's history, newest first")
	fs.String("pipeline", "", "with --endpoint: only this pipeline's (or shard's) entries")
	fs.Bool("failed", false, "with --endpoint: failed attempts only")
	fs.String("since", "", "with --endpoint: entries at or after this time (RFC 3339, or a duration before now such as 2h)")
	fs.String("until", "", "with --endpoint: entries before this time (RFC 3339 or a duration before now)")
	fs.Int("limit", defaultDeliveriesLimit, "with --endpoint: at most this many entries")
	fs.Bool("json", false, "print JSON (stable field names)")
	fs.Duration("timeout", 10*time.Second, "give up after this long")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		event, _ := fs.GetString("event")
		ep, _ := fs.GetString("endpoint")
		if (event == "") == (ep == "") {
			return usageError{errors.New("pass --event ID (an event's attempts) or --endpoint ID (an endpoint's history)")}
		}
		if event != "" {
			for _, f := range []string{"pipeline", "failed", "since", "until", "limit"} {
				if fs.Changed(f) {
					return usageError{fmt.Errorf("--%s goes with --endpoint, not --event", f)}
				}
			}
			if _, err := uuid.Parse(event); err != nil {
				return usageError{fmt.Errorf("--event %q: want an event id (a UUID, the id column of outbox_events)", event)}
			}
		}
		dsn, err := requireDSN(fs)
		if err != nil {
			return err
		}
		var q state.EndpointHistoryQuery
		if ep != "" {
			if q, err = historyQuery(fs, ep, time.Now()); err != nil {
				return err
			}
		}
		timeout, _ := fs.GetDuration("timeout")
		if timeout <= 0 {
			return usageError{errors.New("--timeout must be positive")}
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
		defer cancel()
		conn, s, err := connectSchema(ctx, fs, dsn, "")
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		if err := relayTableIn(ctx, conn, schemaName(fs, ""), s, schema.Deliveries, 15); err != nil {
			return err
		}
		asJSON, _ := fs.GetBool("json")
		if event != "" {
			recs, backlog, err := state.EventDeliveries(ctx, conn, s, event)
			if err != nil {
				return fmt.Errorf("read the delivery log: %w", err)
			}
			if len(recs) == 0 && len(backlog) == 0 && !asJSON {
				return fmt.Errorf("event %s: the delivery log and the endpoints' backlogs hold nothing of it: check the id "+
					"(it must have gone to endpoints), and that it is younger than run --delivery-log-retention (7 days by default)", event)
			}
			rep := eventReport(event, recs, backlog)
			if asJSON {
				return printJSON(cmd.OutOrStdout(), rep)
			}
			return writeEventReport(cmd.OutOrStdout(), rep)
		}
		recs, err := state.EndpointHistory(ctx, conn, s, q)
		if err != nil {
			return fmt.Errorf("read the delivery log: %w", err)
		}
		if len(recs) == 0 {
			var known bool
			if err := conn.QueryRow(ctx, schema.SQL(s, `SELECT EXISTS (SELECT FROM {outbox_endpoints} WHERE id = $1)`), ep).
				Scan(&known); err != nil {
				return fmt.Errorf("look up endpoint %s: %w", ep, err)
			}
			if !known {
				return fmt.Errorf("unknown endpoint %q, and the delivery log holds nothing of it: list the endpoints with `outbox-relay endpoint list`", ep)
			}
		}
		rep := historyReport(q, recs)
		if asJSON {
			return printJSON(cmd.OutOrStdout(), rep)
		}
		return writeHistoryReport(cmd.OutOrStdout(), rep)
	}
	return cmd
}

// historyQuery reads the flags of `deliveries --endpoint`.
func historyQuery(fs *pflag.FlagSet, ep string, now time.Time) (state.EndpointHistoryQuery, error) {
	q := state.EndpointHistoryQuery{Endpoint: ep, Until: now.Add(time.Minute)} // entries a clock a little ahead wrote
	q.Pipeline, _ = fs.GetString("pipeline")
	q.Failed, _ = fs.GetBool("failed")
	if q.Limit, _ = fs.GetInt("limit"); q.Limit <= 0 {
		return q, usageError{fmt.Errorf("--limit %d: want a positive number of entries", q.Limit)}
	}
	var err error
	if v, _ := fs.GetString("since"); v != "" {
		if q.Since, err = parseWhen("since", v, now); err != nil {
			return q, err
		}
	}
	if v, _ := fs.GetString("until"); v != "" {
		if q.Until, err = parseWhen("until", v, now); err != nil {
			return q, err
		}
	}
	if !q.Until.After(q.Since) {
		return q, usageError{fmt.Errorf("--until %s is not after --since %s", q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))}
	}
	return q, nil
}
