package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
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
moved first (README: Upgrades).`,
		Example: `  DB_DSN=postgres://app@db:5432/app outbox-relay migrate
  outbox-relay migrate --schema outbox`,
	}
	addDSNFlag(cmd.Flags())
	addSchemaFlag(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		dsn, err := requireDSN(cmd.Flags())
		if err != nil {
			return err
		}
		out, err := migrations.UpWith(cmd.Context(), dsn, migrations.Options{Schema: schemaName(cmd.Flags(), "")})
		if err != nil {
			return err
		}
		printMigrate(cmd.OutOrStdout(), out)
		// The schema does not need logical decoding, the relay does: say so now, not at `run`.
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
	return cmd
}

// printMigrate says what migrate did: history moved or recorded, migrations applied.
func printMigrate(w io.Writer, out migrations.Outcome) {
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
	for _, r := range out.Applied {
		fmt.Fprintf(w, "applied %05d %s\n", r.Version, r.Source)
	}
	if len(out.Applied) == 0 {
		fmt.Fprintf(w, "schema %s is up to date\n", schema.Quote(out.Schema))
	}
}
