package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// Settings of the endpoint commands that read the environment.
var (
	secretsKeyFileFlag = envFlag{name: "secrets-key-file", env: "OUTBOX_RELAY_SECRETS_KEY_FILE"}
	// secretsKeyEnv holds the keys themselves; it has no flag, so a key never shows in ps.
	secretsKeyEnv = "OUTBOX_RELAY_SECRETS_KEY"
)

// endpointCommands are the subcommands of endpoint, for the error on an unknown one.
var endpointCommands = []string{"add", "list", "show", "update", "pause", "resume", "disable", "enable", "rotate-secret", "remove", "reseal"}

func newEndpointCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "endpoint",
		Short: "Add, list, change and remove partner endpoints (rows of outbox_endpoints)",
		Long: `Manages the partner endpoints a pipeline run with endpoints fans its events out to: rows of
outbox_endpoints, changed in one transaction each, so a relay applies every change at its commit.
Each command takes --json for scripts. Exit codes: 0 done, 1 not found, exists, wrong state or a
database error, 2 bad input (with the reason and the fix; nothing is written).
Secrets are printed once, by add and rotate-secret, and never again: list and show print a
fingerprint. With a secrets key (OUTBOX_RELAY_SECRETS_KEY or --secrets-key-file) they are
sealed at rest (docs/guides/endpoints.md).`,
		Example: `  outbox-relay endpoint add --id acme --url https://acme.example/webhooks --tenant acme --event-types 'order.*,invoice.paid'
  outbox-relay endpoint list --tenant acme
  outbox-relay endpoint rotate-secret acme --keep-old 24h`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			err := fmt.Errorf("unknown command %q for outbox-relay endpoint: use one of %s", args[0], strings.Join(endpointCommands, ", "))
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				err = fmt.Errorf("%w. Did you mean %s?", err, strings.Join(s, " or "))
			}
			return usageError{err}
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.SuggestionsMinimumDistance = 2
	cmd.AddCommand(newEndpointAddCmd(), newEndpointListCmd(), newEndpointShowCmd(), newEndpointUpdateCmd(),
		newEndpointStateCmd("pause"), newEndpointStateCmd("resume"), newEndpointStateCmd("disable"),
		newEndpointStateCmd("enable"), newEndpointRotateCmd(), newEndpointRemoveCmd(), newEndpointResealCmd())
	return cmd
}

// oneID is the Args of the commands that take one endpoint id.
func oneID(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageError{fmt.Errorf("%s takes one argument, the endpoint's id (outbox-relay endpoint list shows them)", cmd.CommandPath())}
	}
	return nil
}

// addEndpointCommon adds the flags every endpoint command has.
func addEndpointCommon(fs *pflag.FlagSet) {
	addDSNFlag(fs)
	addSchemaFlag(fs)
	fs.Bool("json", false, "print the result as JSON (the table's column names; see docs/guides/endpoints-managing.md)")
}

// addSecretsKeyFlag adds the flag of the commands that write secrets.
func addSecretsKeyFlag(fs *pflag.FlagSet) {
	fs.String(secretsKeyFileFlag.name, "", "seal secrets with the keys in this file (env OUTBOX_RELAY_SECRETS_KEY_FILE; "+
		"or the keys themselves in OUTBOX_RELAY_SECRETS_KEY); the first key seals, every key opens")
}

// endpointStore connects and returns the endpoint functions' settings: the relay's schema
// (--schema, or the connection's current_schema()) and the sealer when a key is configured.
func endpointStore(cmd *cobra.Command) (*pgx.Conn, endpoints.Store, error) {
	fs := cmd.Flags()
	var eps endpoints.Store
	dsn, err := requireDSN(fs)
	if err != nil {
		return nil, eps, err
	}
	if fs.Lookup(secretsKeyFileFlag.name) != nil {
		if eps.Sealer, err = loadSealer(fs); err != nil {
			return nil, eps, err
		}
	}
	if f := fs.Lookup("metrics-addr"); f != nil {
		eps.RelayMetricsAddr = f.Value.String()
	}
	if fs.Lookup(egressDenyFlag.name) != nil {
		if eps.Egress, err = egressPolicy(fs); err != nil {
			return nil, eps, err
		}
	}
	conn, s, err := connectSchema(cmd.Context(), fs, dsn, "")
	if err != nil {
		return nil, eps, err
	}
	if err := endpointsTableIn(cmd.Context(), conn, schemaName(fs, ""), s); err != nil {
		conn.Close(context.Background())
		return nil, eps, err
	}
	eps.Schema = s
	return conn, eps, nil
}

// endpointsTableIn returns nil when schema s (resolved from name, the operator's --schema) has
// outbox_endpoints, else an error that says what to migrate, or which --schema has the table.
func endpointsTableIn(ctx context.Context, conn *pgx.Conn, name, s string) error {
	return relayTableIn(ctx, conn, name, s, schema.Endpoints, 13)
}

// relayTableIn returns nil when schema s (resolved from name) has table, which migration
// version creates, else an error that says what to migrate, or which --schema has the table.
func relayTableIn(ctx context.Context, conn *pgx.Conn, name, s, table string, version int) error {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema.Qualify(s, table)).Scan(&exists); err != nil {
		return fmt.Errorf("look up %s: %w", table, err)
	}
	if exists {
		return nil
	}
	where := "schema " + schema.Quote(s)
	if name == "" {
		where += " (the connection's current_schema(), first on its search_path)"
	}
	msg := fmt.Sprintf("table %s does not exist in %s: run `%s` (endpoints need migration %d)",
		table, where, schema.MigrateCommand(name, s), version)
	others, err := schema.Elsewhere(ctx, conn, s, table)
	if err != nil {
		return err
	}
	if len(others) > 0 {
		msg += fmt.Sprintf("; it exists in schema %s: if that is the relay's, pass --schema %s (env OUTBOX_RELAY_SCHEMA)",
			strings.Join(others, ", "), others[0])
	}
	return errors.New(msg)
}

// loadSealer reads the secrets keys (readSecretsKeys) into a sealer; nil when none is set.
func loadSealer(fs *pflag.FlagSet) (*endpoints.Sealer, error) {
	text, from, err := readSecretsKeys(fs)
	if err != nil || text == "" {
		return nil, err
	}
	s, err := endpoints.NewSealer(text)
	if err != nil {
		return nil, usageError{fmt.Errorf("%s: %s", from, strings.TrimPrefix(err.Error(), "endpoints: "))}
	}
	return s, nil
}

// readSecretsKeys returns the secrets keys' text from --secrets-key-file (or its variable),
// else from OUTBOX_RELAY_SECRETS_KEY, and where it came from; empty when neither is set. The
// relay's own flag reads them the same way (seal.Parse parses them).
func readSecretsKeys(fs *pflag.FlagSet) (text, from string, err error) {
	if path := stringFrom(fs, secretsKeyFileFlag); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", "", usageError{fmt.Errorf("read the secrets key file: %w", err)}
		}
		if strings.TrimSpace(string(b)) == "" {
			return "", "", usageError{fmt.Errorf("%s is empty: put keys of 32 random bytes in base64 in it (openssl rand -base64 32)", path)}
		}
		return string(b), path, nil
	}
	return os.Getenv(secretsKeyEnv), secretsKeyEnv, nil
}

// warnClear tells, on stderr, that a secret was stored in clear.
func warnClear(cmd *cobra.Command, eps endpoints.Store) {
	if eps.Sealer == nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning: no secrets key (OUTBOX_RELAY_SECRETS_KEY or --secrets-key-file): "+
			"the secret is stored in clear in outbox_endpoints (docs/guides/endpoints-secrets.md, Secrets)")
	}
}

// endpointError turns the outbox package's errors into the command's: bad input is a usage
// error (exit 2); a missing or taken id says what to run.
func endpointError(err error, id string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, endpoints.ErrInvalid):
		return usageError{errors.New(strings.TrimPrefix(err.Error(), "endpoints: "))}
	case errors.Is(err, endpoints.ErrNotFound):
		return fmt.Errorf("no endpoint %q: `outbox-relay endpoint list` lists them", id)
	case errors.Is(err, endpoints.ErrExists):
		return fmt.Errorf("endpoint %q exists: choose another --id, or change it with `outbox-relay endpoint update %s`", id, id)
	}
	return errors.New(strings.TrimPrefix(err.Error(), "endpoints: "))
}

func withStore(cmd *cobra.Command, f func(ctx context.Context, conn *pgx.Conn, eps endpoints.Store) error) error {
	conn, eps, err := endpointStore(cmd)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return f(cmd.Context(), conn, eps)
}
