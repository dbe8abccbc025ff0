package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/pipeconf"
	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/relay"
)

func newDropPipelineCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drop-pipeline NAME",
		Short: "Drop a pipeline's slot and publication (refused while a relay streams it)",
		Long: `Drops the replication slot and the publication of pipeline NAME: outbox_relay_NAME (outbox_relay
for the pipeline named default), or the names the --config file gives it. The slot retains WAL
until it is dropped, so a pipeline removed from the configuration should be dropped. Refused
(exit 1) while a process streams from the slot. The pipeline's dead letters and parked
aggregates stay in outbox_pipeline_events and outbox_parked_aggregates.`,
		Example: `  outbox-relay drop-pipeline billing_shadow`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{errors.New("drop-pipeline takes one argument, the pipeline's name")}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	addDSNFlag(fs)
	addSchemaFlag(fs)
	fs.String(configFlag.name, "", "take the pipeline's slot and publication names from this YAML file (env OUTBOX_RELAY_CONFIG)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		dsn, err := requireDSN(fs)
		if err != nil {
			return err
		}
		p := relay.Pipeline{Name: args[0]}
		if p.Name == relay.DefaultPipeline {
			p.Slot, p.Publication = relay.DefaultSlot, relay.DefaultPublication
		}
		fileSchema := ""
		if path := stringFrom(fs, configFlag); path != "" {
			file, err := pipeconf.Load(path)
			if err != nil {
				return usageError{err}
			}
			fileSchema = file.Schema
			for _, fp := range file.Pipelines {
				for _, s := range fp.ShardPipelines() { // a shard is dropped by its name, orders_s2of4
					if s.Name == p.Name {
						p = s
					}
				}
			}
		}
		p = p.WithDefaults()
		conn, s, err := connectSchema(cmd.Context(), fs, dsn, fileSchema)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		slotDropped, pubDropped, err := dropPipeline(cmd.Context(), conn, s, p)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "pipeline %s: slot %s %s, publication %s %s\n", p.Name, p.Slot, dropped(slotDropped),
			p.Publication, dropped(pubDropped))
		return nil
	}
	return cmd
}

func dropped(b bool) string {
	if b {
		return "dropped"
	}
	return "did not exist"
}

// errSlotActive means drop-pipeline found a process streaming from the slot.
var errSlotActive = errors.New("slot is active")

// dropPipeline drops p's slot (unless a process streams from it) and publication, and forgets
// the slot's backfill and creation record in schema s.
func dropPipeline(ctx context.Context, conn *pgx.Conn, s string, p relay.Pipeline) (slotDropped, pubDropped bool, err error) {
	var active bool
	err = conn.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, p.Slot).Scan(&active)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return false, false, fmt.Errorf("look up slot %q: %w", p.Slot, err)
	case active:
		return false, false, fmt.Errorf("%w: a process streams pipeline %q from slot %q; stop it, or remove the pipeline "+
			"from its --config and restart it, then drop again", errSlotActive, p.Name, p.Slot)
	default:
		if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, p.Slot); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ObjectInUse {
				return false, false, fmt.Errorf("%w: a process took slot %q meanwhile: %v", errSlotActive, p.Slot, err)
			}
			return false, false, fmt.Errorf("drop slot %q: %w", p.Slot, err)
		}
		slotDropped = true
	}
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, p.Publication).
		Scan(&pubDropped); err != nil {
		return slotDropped, false, fmt.Errorf("look up publication: %w", err)
	}
	if pubDropped {
		if _, err := conn.Exec(ctx, "DROP PUBLICATION "+pgx.Identifier{p.Publication}.Sanitize()); err != nil {
			return slotDropped, false, fmt.Errorf("drop publication %q: %w", p.Publication, err)
		}
	}
	if _, err := conn.Exec(ctx, schema.SQL(s, `DELETE FROM {outbox_backfill} WHERE slot = $1`), p.Slot); err != nil {
		return slotDropped, pubDropped, fmt.Errorf("forget the backfill of slot %q: %w", p.Slot, err)
	}
	if _, err := conn.Exec(ctx, schema.SQL(s, `DELETE FROM {outbox_slots} WHERE slot = $1`), p.Slot); err != nil {
		return slotDropped, pubDropped, fmt.Errorf("forget slot %q: %w", p.Slot, err)
	}
	return slotDropped, pubDropped, nil
}
