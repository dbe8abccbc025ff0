package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/migrations"
)

func newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox_events and inbox_events tables",
		Long: `Applies the embedded schema migrations that have not been applied yet, under an advisory
lock, so running it twice, or from two processes at once, is safe.

With --inbox-only it creates inbox_events alone, for a consumer's database: nothing of the
outbox, and its own version history (` + migrations.InboxHistoryTable + `). Either may run first;
a later full migrate keeps the inbox's table and rows.`,
		Example: `  DB_DSN=postgres://app@db:5432/app outbox-relay migrate
  DB_DSN=postgres://warehouse@db:5432/warehouse outbox-relay migrate --inbox-only`,
	}
	addDSNFlag(cmd.Flags())
	inboxOnly := cmd.Flags().Bool("inbox-only", false,
		"create only inbox_events, for a consumer's database: nothing of the outbox, its own version history")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		dsn, err := requireDSN(cmd.Flags())
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		if *inboxOnly {
			applied, err := migrateInbox(cmd.Context(), dsn)
			if err != nil {
				return err
			}
			printApplied(out, applied, "the inbox's schema is up to date")
			return nil
		}
		applied, err := migrations.Up(cmd.Context(), dsn)
		if err != nil {
			return err
		}
		// The inbox's own set too, so that inbox_events has what inbox.Prune needs here as well.
		inbox, err := migrateInbox(cmd.Context(), dsn)
		if err != nil {
			return err
		}
		printApplied(out, append(applied, inbox...), "schema is up to date")
		return walLevelCheck(cmd, dsn)
	}
	return cmd
}

func printApplied(w io.Writer, applied []migrations.Result, upToDate string) {
	for _, r := range applied {
		fmt.Fprintf(w, "applied %05d %s\n", r.Version, r.Source)
	}
	if len(applied) == 0 {
		fmt.Fprintln(w, upToDate)
	}
}

// migrateInbox applies the inbox set in the connection's current_schema().
func migrateInbox(ctx context.Context, dsn string) ([]migrations.Result, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("migrate: bad DSN (set DB_DSN or --dsn to a postgres:// URL): %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	return migrations.UpInbox(ctx, db, "")
}

// walLevelCheck warns when the server cannot decode logically: the schema does not need it,
// the relay does, so say so now, not at `run`.
func walLevelCheck(cmd *cobra.Command, dsn string) error {
	conn, err := pgx.Connect(cmd.Context(), dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	warning, err := walLevelWarning(cmd.Context(), conn)
	if err != nil {
		return err
	}
	if warning != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+warning)
	}
	return nil
}
