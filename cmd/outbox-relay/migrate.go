package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/migrations"
)

func newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox_events and inbox_events tables",
		Long: `Applies the embedded schema migrations that have not been applied yet, under an advisory
lock, so running it twice, or from two processes at once, is safe. The tables go into --schema
(created if missing), or the connection's current_schema(); the applied versions are recorded in
outbox_relay_schema there, never in goose_db_version, which an application's own goose keeps.
A database migrated by a release that recorded the relay's versions in goose_db_version has them
moved first (docs/operations/maintenance.md, Upgrades). The inbox's own set follows, in the same schema.

With --inbox-only it creates inbox_events alone, for a consumer's database: nothing of the
outbox, and its own version history (` + migrations.InboxHistoryTable + `). Either may run first;
a later full migrate keeps the inbox's table and rows.`,
		Example: `  DB_DSN=postgres://app@db:5432/app outbox-relay migrate
  outbox-relay migrate --schema outbox
  DB_DSN=postgres://warehouse@db:5432/warehouse outbox-relay migrate --inbox-only`,
	}
	addDSNFlag(cmd.Flags())
	addSchemaFlag(cmd.Flags())
	inboxOnly := cmd.Flags().Bool("inbox-only", false,
		"create only inbox_events, for a consumer's database: nothing of the outbox, its own version history")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		dsn, err := requireDSN(cmd.Flags())
		if err != nil {
			return err
		}
		name := schemaName(cmd.Flags(), "")
		w := cmd.OutOrStdout()
		if *inboxOnly {
			s, applied, err := migrateInbox(cmd.Context(), dsn, name)
			if err != nil {
				return err
			}
			printApplied(w, applied)
			if len(applied) == 0 {
				fmt.Fprintf(w, "the inbox in schema %s is up to date\n", schema.Quote(s))
			}
			return nil
		}
		out, err := migrations.UpWith(cmd.Context(), dsn, migrations.Options{Schema: name})
		if err != nil {
			return err
		}
		// The inbox's own set too, in the schema just migrated, so that inbox_events has what
		// inbox.Prune needs here as well.
		_, inbox, err := migrateInbox(cmd.Context(), dsn, out.Schema)
		if err != nil {
			return err
		}
		printMigrate(w, out, inbox)
		return walLevelCheck(cmd, dsn)
	}
	return cmd
}

// printMigrate says what migrate did: history moved or recorded, the relay's migrations and
// then the inbox's applied.
func printMigrate(w io.Writer, out migrations.Outcome, inbox []migrations.Result) {
	own := schema.Qualify(out.Schema, schema.VersionTable)
	if n := len(out.Moved); n > 0 {
		legacy := schema.Qualify(out.Schema, schema.LegacyVersionTable)
		fmt.Fprintf(w, "moved the relay's versions %d-%d from %s to %s", out.Moved[0], out.Moved[n-1], legacy, own)
		if out.LegacyDropped {
			fmt.Fprintf(w, "; %s held nothing else and was dropped\n", legacy)
		} else {
			fmt.Fprintf(w, "; the other rows of %s are untouched\n", legacy)
		}
	}
	if n := len(out.Adopted); n > 0 {
		fmt.Fprintf(w, "recorded versions %d-%d in %s: their tables were already there (installed from the migration files)\n",
			out.Adopted[0], out.Adopted[n-1], own)
	}
	printApplied(w, out.Applied)
	printApplied(w, inbox)
	if len(out.Applied) == 0 && len(inbox) == 0 {
		fmt.Fprintf(w, "schema %s is up to date\n", schema.Quote(out.Schema))
	}
}

func printApplied(w io.Writer, applied []migrations.Result) {
	for _, r := range applied {
		fmt.Fprintf(w, "applied %05d %s\n", r.Version, r.Source)
	}
}

// migrateInbox applies the inbox set in schema name, created if missing as migrate creates the
// relay's, or in the connection's current_schema() when name is empty. It returns the schema
// and what it applied.
func migrateInbox(ctx context.Context, dsn, name string) (string, []migrations.Result, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", nil, fmt.Errorf("migrate: bad DSN (set DB_DSN or --dsn to a postgres:// URL): %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	s := name
	if name != "" {
		err = schema.Create(ctx, conn, name)
	} else {
		s, err = schema.Resolve(ctx, conn, "")
	}
	if err != nil {
		return "", nil, fmt.Errorf("migrate the inbox: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	applied, err := migrations.UpInbox(ctx, db, s)
	return s, applied, err
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
