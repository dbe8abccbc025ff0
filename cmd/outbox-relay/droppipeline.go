package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/pipeconf"
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
		slotDropped, pubDropped, err := control.DropPipeline(cmd.Context(), conn, s, p.Name, p.Slot, p.Publication)
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
