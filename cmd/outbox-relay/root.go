package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// usageError marks an error in the command line itself (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "outbox-relay",
		Short: "Relay transactional outbox rows from PostgreSQL to signed webhooks",
		Long: `outbox-relay reads INSERTs on outbox_events from a pgoutput logical replication slot,
delivers each row as an HMAC-signed POST (in commit order per aggregate, in parallel across
aggregates) and confirms the slot only after delivery.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	// noArgs suggests a command for a mistyped one, within this Levenshtein distance (or a
	// prefix): "statsu" → status.
	root.SuggestionsMinimumDistance = 2
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (`%s --help` lists its flags)", err, cmd.CommandPath())}
	})
	root.AddCommand(newRunCmd(), newMigrateCmd(), newReplayCmd(), newDemoCmd(), newVersionCmd(), newStatusCmd(), newPruneCmd(),
		newPauseCmd(), newResumeCmd(), newReshardCmd(), newAPICmd(), newAPITokenCmd(), newPortalLinkCmd())
	for _, c := range root.Commands() {
		c.Args = noArgs
	}
	root.AddCommand(newDropPipelineCmd()) // takes the pipeline's name as its argument
	root.AddCommand(newEndpointCmd())     // a group: its subcommands take an endpoint id
	root.AddCommand(newDeliveriesCmd())
	root.AddCommand(newEventTypesCmd()) // a group: list, sync
	return root
}

// noArgs rejects positional arguments as a usage error, which also catches unknown
// subcommands of the root.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if !cmd.HasParent() {
		err := fmt.Errorf("unknown command %q", args[0])
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			return usageError{fmt.Errorf("%w. Did you mean %s?", err, strings.Join(s, " or "))}
		}
		return usageError{fmt.Errorf("%w (`outbox-relay --help` lists the commands)", err)}
	}
	return usageError{fmt.Errorf("unexpected argument %q: %s takes no arguments (`%s --help`)", args[0], cmd.CommandPath(), cmd.CommandPath())}
}

// envFlag is a flag that falls back to an environment variable. The flag wins when both are
// set; the variable's value never appears in --help.
type envFlag struct {
	name, env string
}

// stringFrom returns the flag's value if it was given, else the environment variable, else the
// flag's default.
func stringFrom(fs *pflag.FlagSet, f envFlag) string {
	if fs.Changed(f.name) {
		v, _ := fs.GetString(f.name)
		return v
	}
	if v, ok := os.LookupEnv(f.env); ok && v != "" {
		return v
	}
	v, _ := fs.GetString(f.name)
	return v
}

var (
	dsnFlag    = envFlag{name: "dsn", env: "DB_DSN"}
	schemaFlag = envFlag{name: "schema", env: "OUTBOX_RELAY_SCHEMA"}
)

func addDSNFlag(fs *pflag.FlagSet) {
	addSetting(fs, dsnFlag.name)
}

// addSchemaFlag adds --schema, of every command that reads or writes the relay's tables.
func addSchemaFlag(fs *pflag.FlagSet) {
	addSetting(fs, schemaFlag.name)
}

// schemaName is the schema the operator named: --schema, else OUTBOX_RELAY_SCHEMA, else
// fromFile (the pipelines file's schema:), else "" for the connection's current_schema().
func schemaName(fs *pflag.FlagSet, fromFile string) string {
	if s := stringFrom(fs, schemaFlag); s != "" {
		return s
	}
	return fromFile
}

// connectSchema connects to dsn and resolves the relay's schema on that connection: named
// (schemaName) or current_schema(). The error names the fix when there is no such schema.
func connectSchema(ctx context.Context, fs *pflag.FlagSet, dsn, fromFile string) (*pgx.Conn, string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, "", fmt.Errorf("connect: %w", err)
	}
	s, err := schema.Resolve(ctx, conn, schemaName(fs, fromFile))
	if err != nil {
		conn.Close(context.Background())
		return nil, "", err
	}
	return conn, s, nil
}

func requireDSN(fs *pflag.FlagSet) (string, error) {
	dsn := stringFrom(fs, dsnFlag)
	if dsn == "" {
		return "", usageError{fmt.Errorf("no database: set DB_DSN or pass --dsn postgres://user@host:5432/db")}
	}
	return dsn, nil
}
