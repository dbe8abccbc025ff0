package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/outbox"
)

func newPruneCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Delete delivered outbox rows older than --older-than, in batches",
		Long: `Deletes the outbox_events rows every pipeline is done with that are older than --older-than:
rows marked 'done' by processed_at, and, where no pipeline marks rows (no status owner, --marks off),
'pending' rows by available_at. A pipeline is done with a row once its replication slot has confirmed
the row and it holds nothing of it (failed, parked, or in its backfill; for an endpoint, in its
backlog, failed or parked); every logical slot of the database counts, whether its relay runs or
not. A row in the range of a replay --since not done yet is kept until it is. Failed and parked rows are never touched. At most
--batch-size rows go per transaction, until none is left; rows locked by others are skipped. The
deletes are not sent to the webhook: the relay's publication publishes inserts only. Ctrl-C stops
between batches.`,
		Example: `  DB_DSN=postgres://relay@db:5432/app outbox-relay prune --older-than 168h
  outbox-relay prune --older-than 720h --dry-run`,
	}
	fs := cmd.Flags()
	addDSNFlag(fs)
	addSchemaFlag(fs)
	fs.Duration("older-than", 0, "delete rows delivered (done) or written (pending, where no pipeline marks rows) longer ago than this, e.g. 168h for a week (required)")
	fs.Int("batch-size", outbox.DefaultPruneBatchSize, "rows deleted per transaction")
	fs.Duration("batch-pause", 0, "pause between batches, to spread the load")
	fs.Bool("dry-run", false, "count the rows that would be deleted; delete nothing")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		opts, err := pruneOptions(cmd)
		if err != nil {
			return err
		}
		dsn, err := requireDSN(fs)
		if err != nil {
			return err
		}
		conn, s, err := connectSchema(cmd.Context(), fs, dsn, "")
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		opts.Schema = s
		res, err := outbox.Prune(cmd.Context(), conn, opts)
		writePrune(cmd.OutOrStdout(), res, opts.DryRun, err)
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted; run prune again to delete the rest")
		}
		return err
	}
	return cmd
}

func pruneOptions(cmd *cobra.Command) (outbox.PruneOptions, error) {
	fs := cmd.Flags()
	var o outbox.PruneOptions
	o.OlderThan, _ = fs.GetDuration("older-than")
	o.BatchSize, _ = fs.GetInt("batch-size")
	o.Pause, _ = fs.GetDuration("batch-pause")
	o.DryRun, _ = fs.GetBool("dry-run")
	switch {
	case o.OlderThan <= 0:
		return o, usageError{errors.New("--older-than is required and must be positive, e.g. --older-than 168h")}
	case o.BatchSize <= 0:
		return o, usageError{errors.New("--batch-size must be positive")}
	case o.Pause < 0:
		return o, usageError{errors.New("--batch-pause must not be negative")}
	}
	return o, nil
}

// writePrune prints what a prune did, and what it kept for a slot that has not confirmed it.
func writePrune(w io.Writer, res outbox.PruneResult, dryRun bool, err error) {
	switch {
	case dryRun && err == nil:
		fmt.Fprintf(w, "would delete %d rows every pipeline is done with, older than %s\n", res.Deleted, clock(res.Cutoff))
	case !dryRun && (err == nil || res.Deleted > 0):
		fmt.Fprintf(w, "deleted %d rows every pipeline is done with, older than %s, in %d batches\n", res.Deleted,
			clock(res.Cutoff), res.Batches)
	}
	if err == nil && res.Kept > 0 {
		fmt.Fprintf(w, "kept %d older rows slot %s has not confirmed: its pipeline is behind or stopped (see `outbox-relay status`); "+
			"`outbox-relay drop-pipeline NAME` removes a pipeline that is gone\n", res.Kept, res.Behind)
	}
}
