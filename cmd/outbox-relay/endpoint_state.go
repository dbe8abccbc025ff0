package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// stateCommands describe pause, resume, disable and enable.
var stateCommands = map[string]struct {
	short, long, example string
	reason               bool
	state                endpoints.State
	do                   func(eps endpoints.Store, ctx context.Context, q endpoints.Querier, id, reason string) (endpoints.Endpoint, error)
	after                string
}{
	"pause": {
		short: "Pause an endpoint: its events are kept and delivered, in order, when it is resumed",
		long: `Pauses an enabled endpoint from this command's commit on: the relay holds the events routed to it
and delivers them, in order per aggregate, once it is resumed. Pausing a paused endpoint changes
nothing; a disabled one is refused (exit 1).`,
		example: `  outbox-relay endpoint pause acme --reason "partner maintenance until 14:00"`,
		reason:  true, state: endpoints.Paused,
		do: func(e endpoints.Store, ctx context.Context, q endpoints.Querier, id, r string) (endpoints.Endpoint, error) {
			return e.Pause(ctx, q, id, r)
		},
		after: "`outbox-relay endpoint resume {id}` resumes it",
	},
	"resume": {
		short: "Resume a paused endpoint", long: `Resumes a paused endpoint: it receives the events held since the pause, in order, then the
new ones. A disabled endpoint is refused (exit 1): enable it.`,
		example: `  outbox-relay endpoint resume acme`, state: endpoints.Enabled,
		do: func(e endpoints.Store, ctx context.Context, q endpoints.Querier, id, _ string) (endpoints.Endpoint, error) {
			return e.Resume(ctx, q, id)
		},
		after: "it receives the events held since the pause, then the new ones",
	},
	"disable": {
		short: "Disable an endpoint: it receives nothing until enabled",
		long: `Disables an endpoint, paused or not, from this command's commit on: events committed after it
are not routed to it, and those the relay still holds for it go to its backlog
(outbox_endpoint_backlog), kept until it is enabled, when they are delivered in order before the
new ones, or removed. Disabling a disabled endpoint changes nothing.`,
		example: `  outbox-relay endpoint disable acme --reason "contract ended"`,
		reason:  true, state: endpoints.Disabled,
		do: func(e endpoints.Store, ctx context.Context, q endpoints.Querier, id, r string) (endpoints.Endpoint, error) {
			return e.Disable(ctx, q, id, r)
		},
		after: "`outbox-relay endpoint enable {id}` enables it and delivers what it kept",
	},
	"enable": {
		short: "Enable a disabled endpoint", long: `Enables a disabled endpoint: it receives the events committed from now on. A paused endpoint is
refused (exit 1): resume it.`,
		example: `  outbox-relay endpoint enable acme`, state: endpoints.Enabled,
		do: func(e endpoints.Store, ctx context.Context, q endpoints.Querier, id, _ string) (endpoints.Endpoint, error) {
			return e.Enable(ctx, q, id)
		},
		after: "it receives the events committed from now on",
	},
}

func newEndpointStateCmd(name string) *cobra.Command {
	sc := stateCommands[name]
	cmd := &cobra.Command{Use: name + " ID", Short: sc.short, Long: sc.long, Example: sc.example, Args: oneID}
	fs := cmd.Flags()
	addEndpointCommon(fs)
	if sc.reason {
		fs.String("reason", "", "why, shown by list and show")
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id := args[0]
		reason := ""
		if sc.reason {
			reason, _ = fs.GetString("reason")
		}
		return withStore(cmd, func(ctx context.Context, conn *pgx.Conn, eps endpoints.Store) error {
			before, err := eps.Get(ctx, conn, id)
			if err != nil {
				return endpointError(err, id)
			}
			e, err := sc.do(eps, ctx, conn, id, reason)
			if err != nil {
				return endpointError(err, id)
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), toJSON(e))
			}
			if before.State == sc.state {
				fmt.Fprintf(cmd.OutOrStdout(), "endpoint %s was already %s; nothing changed\n", id, sc.state)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "endpoint %s %s; %s\n", id, e.State, strings.ReplaceAll(sc.after, "{id}", id))
			return nil
		})
	}
	return cmd
}

func newEndpointRotateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rotate-secret ID [--keep-old 24h]",
		Short: "Give an endpoint a new secret; prints it once",
		Long: `Stores a new secret (generated, or --secret) first in the endpoint's list and prints it once. With
--keep-old the current secrets keep signing alongside it for that long, so the partner can switch
without a failed delivery (each request carries one signature per secret); without it they stop at
the command's commit.`,
		Example: `  outbox-relay endpoint rotate-secret acme --keep-old 24h`,
		Args:    oneID,
	}
	fs := cmd.Flags()
	addEndpointCommon(fs)
	addSecretsKeyFlag(fs)
	fs.Duration("keep-old", 0, "keep the current secrets signing for this long, e.g. 24h; 0 = they stop at once")
	fs.String("secret", "", "the new secret; left out: a strong one is generated")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var opts endpoints.RotateOptions
		opts.KeepOld, _ = fs.GetDuration("keep-old")
		opts.Secret, _ = fs.GetString("secret")
		if fs.Changed("secret") && opts.Secret == "" {
			return usageError{errors.New("--secret is empty: give the secret, or leave --secret out to generate one")}
		}
		if opts.KeepOld < 0 {
			return usageError{errors.New("--keep-old must not be negative; 0 stops the old secrets at once")}
		}
		return withStore(cmd, func(ctx context.Context, conn *pgx.Conn, eps endpoints.Store) error {
			e, err := eps.RotateSecret(ctx, conn, args[0], opts)
			if err != nil {
				return endpointError(err, args[0])
			}
			if fs.Changed("secret") {
				e.Secret = ""
			} else {
				warnClear(cmd, eps)
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), toJSON(e))
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "endpoint %s: new secret, fingerprint %s\n", e.ID, e.Secrets[0].Fingerprint)
			printSecret(w, e)
			if len(e.Secrets) > 1 {
				fmt.Fprintf(w, "the old secret%s keep%s signing until %s\n", plural(len(e.Secrets)-1), verbS(len(e.Secrets)-1),
					clock(e.Secrets[1].ExpiresAt))
			} else {
				fmt.Fprintln(w, "the old secrets no longer sign")
			}
			return nil
		})
	}
	return cmd
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func verbS(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}

func newEndpointRemoveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remove ID [--force]",
		Short: "Remove an endpoint: events committed after it are not sent to it",
		Long: `Deletes the endpoint's row. Events committed after this command's commit are not routed to it,
and those the relay still holds for it are not sent but recorded as abandoned (under
<pipeline>/<id> in outbox_pipeline_events).

If the endpoint still holds events in any pipeline (its backlog, its dead letters, its parked
aggregates), removing it drops them: it is refused (exit 1) with their counts unless --force.
To deliver them first, enable or resume the endpoint (its backlog drains) or replay them
(outbox-relay replay --endpoint ID). With --force the row goes, and so do those events'
entries, in the same transaction: prune no longer keeps their rows for the endpoint.`,
		Example: `  outbox-relay endpoint remove acme
  outbox-relay endpoint remove acme --force`,
		Args: oneID,
	}
	addEndpointCommon(cmd.Flags())
	cmd.Flags().Bool("force", false, "remove the endpoint even though it holds events (backlog, dead letters, parked aggregates), dropping them")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		id := args[0]
		force, _ := cmd.Flags().GetBool("force")
		return withStore(cmd, func(ctx context.Context, conn *pgx.Conn, eps endpoints.Store) error {
			var held state.EndpointHolds
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if err := eps.Remove(ctx, tx, id); err != nil {
					return endpointError(err, id)
				}
				var err error
				if held, err = state.CountEndpointHolds(ctx, tx, string(eps.Schema), id); err != nil || held.Empty() {
					return err
				}
				if !force {
					return fmt.Errorf("endpoint %s has %d events in its backlog, %d dead letters and %d parked aggregates; "+
						"`outbox-relay endpoint remove %s --force` drops them (replay or enable first to deliver them)",
						id, held.Backlog, held.DeadLetters, held.Parked, id)
				}
				return state.DropEndpointHolds(ctx, tx, string(eps.Schema), id)
			})
			if err != nil {
				return err
			}
			if wantJSON(cmd) {
				return printJSON(cmd.OutOrStdout(), map[string]any{"id": id, "removed": true,
					"dropped": map[string]int64{"backlog": held.Backlog, "dead_letters": held.DeadLetters, "parked": held.Parked}})
			}
			if held.Empty() {
				fmt.Fprintf(cmd.OutOrStdout(), "removed endpoint %s\n", id)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed endpoint %s, dropping %d events of its backlog, %d dead letters and %d parked aggregates\n",
				id, held.Backlog, held.DeadLetters, held.Parked)
			return nil
		})
	}
	return cmd
}

func newEndpointResealCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reseal",
		Short: "Seal every endpoint's secrets with the first secrets key (after adding or rotating a key)",
		Long: `Seals every endpoint's secrets with the first key of the secrets key file: clear ones, and those
sealed with another key of the file. Run it after putting a new key first (keep the old key after it
until this finishes), or to seal endpoints added before a key was configured. One short transaction
per endpoint; running it again changes nothing.`,
		Example: `  OUTBOX_RELAY_SECRETS_KEY_FILE=/run/secrets/outbox-keys outbox-relay endpoint reseal`,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	addEndpointCommon(fs)
	addSecretsKeyFlag(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return withStore(cmd, func(ctx context.Context, conn *pgx.Conn, eps endpoints.Store) error {
			if eps.Sealer == nil {
				return usageError{errors.New("no secrets key: set OUTBOX_RELAY_SECRETS_KEY or --secrets-key-file")}
			}
			total, changed, err := reseal(ctx, conn, eps)
			if wantJSON(cmd) && err == nil {
				return printJSON(cmd.OutOrStdout(), map[string]any{"endpoints": total, "resealed": changed, "key_id": eps.Sealer.KeyID()})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "resealed %d of %d endpoints with key %s\n", changed, total, eps.Sealer.KeyID())
			return err
		})
	}
	return cmd
}

func reseal(ctx context.Context, conn *pgx.Conn, eps endpoints.Store) (total, changed int, err error) {
	f := endpoints.Filter{Limit: listPage}
	for {
		page, err := eps.List(ctx, conn, f)
		if err != nil {
			return total, changed, endpointError(err, "")
		}
		for _, e := range page {
			ok, err := eps.Reseal(ctx, conn, e.ID)
			if err != nil {
				return total, changed, endpointError(err, e.ID)
			}
			total++
			if ok {
				changed++
			}
		}
		if len(page) < f.Limit {
			return total, changed, nil
		}
		f.After = page[len(page)-1].ID
	}
}
