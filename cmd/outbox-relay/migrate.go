package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/migrations"
)

func newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox_events and inbox_events tables",
		Long: `Applies the embedded schema migrations that have not been applied yet, under an advisory
lock, so running it twice, or from two processes at once, is safe.`,
		Example: `  DB_DSN=postgres://app@db:5432/app outbox-relay migrate`,
	}
	addDSNFlag(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		dsn, err := requireDSN(cmd.Flags())
		if err != nil {
			return err
		}
		applied, err := migrations.Up(cmd.Context(), dsn)
		if err != nil {
			return err
		}
		for _, r := range applied {
			fmt.Fprintf(cmd.OutOrStdout(), "applied %05d %s\n", r.Version, r.Source)
		}
		if len(applied) == 0 {
			fmt.Fprintln(cmd.OutOrStdout(), "schema is up to date")
		}
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
