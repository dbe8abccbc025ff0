package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/internal/pipeconf"
	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/relay"
)

// runEndpointStatus is `status --endpoints`.
func runEndpointStatus(cmd *cobra.Command, fs *pflag.FlagSet, dsn string) error {
	if fs.Changed("top") {
		return usageError{fmt.Errorf("--endpoints and --top do not go together: --endpoints reports every endpoint (narrow it with --pipeline NAME)")}
	}
	fileSchema, slots, err := endpointStatusSlots(fs)
	if err != nil {
		return err
	}
	timeout, _ := fs.GetDuration("timeout")
	if timeout <= 0 {
		return usageError{fmt.Errorf("--timeout must be positive")}
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
	defer cancel()
	conn, s, err := connectSchema(ctx, fs, dsn, fileSchema)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := relayTableIn(ctx, conn, schemaName(fs, fileSchema), s, schema.EndpointStatus, 14); err != nil {
		return err
	}
	rep, err := readEndpointReport(ctx, conn, s)
	if err != nil {
		return err
	}
	if err := rep.readSlots(ctx, conn, slots); err != nil {
		return err
	}
	name, _ := fs.GetString("pipeline")
	if fs.Changed("pipeline") {
		if rep, err = rep.only(name); err != nil {
			return err
		}
	}
	if asJSON, _ := fs.GetBool("json"); asJSON {
		return printJSON(cmd.OutOrStdout(), rep)
	}
	return writeEndpointReport(cmd.OutOrStdout(), rep)
}

// endpointStatusSlots returns the schema of --config's file (if any) and the slots its pipelines
// and --slot name, by pipeline (or shard) name.
func endpointStatusSlots(fs *pflag.FlagSet) (string, map[string]string, error) {
	fileSchema, slots := "", map[string]string{}
	if path := stringFrom(fs, configFlag); path != "" { // the report lists what the tables hold, not the file
		file, err := pipeconf.Load(path)
		if err != nil {
			return "", nil, usageError{err}
		}
		fileSchema = file.Schema
		for _, p := range file.Pipelines {
			for _, sh := range p.ShardPipelines() {
				slots[sh.Name] = sh.WithDefaults().Slot
			}
		}
	}
	if fs.Changed("slot") {
		slots[relay.DefaultPipeline], _ = fs.GetString("slot")
	}
	return fileSchema, slots, nil
}

// readEndpointReport reads the five tables, one query each, and merges them.
func readEndpointReport(ctx context.Context, conn *pgx.Conn, s string) (endpointReport, error) {
	var rep endpointReport
	if err := conn.QueryRow(ctx, `SELECT statement_timestamp()`).Scan(&rep.now); err != nil {
		return rep, fmt.Errorf("read the clock: %w", err)
	}
	states, err := state.EndpointStates(ctx, conn, s)
	if err != nil {
		return rep, err
	}
	lanes, err := state.EndpointStatuses(ctx, conn, s)
	if err != nil {
		return rep, err
	}
	pipes, err := state.EndpointPipelines(ctx, conn, s)
	if err != nil {
		return rep, err
	}
	parked, err := state.ParkedPerLane(ctx, conn, s)
	if err != nil {
		return rep, err
	}
	backlog, err := state.BacklogPerLane(ctx, conn, s)
	if err != nil {
		return rep, err
	}
	return buildEndpointReport(rep.now, states, lanes, pipes, parked, backlog), nil
}

// readSlots reads whether a relay streams each shard's slot, named by slots or, for a name it
// lacks, as the relay names it by default, and warns of a slot nobody streams.
func (rep *endpointReport) readSlots(ctx context.Context, conn *pgx.Conn, slots map[string]string) error {
	var names []string
	for i := range rep.Pipelines {
		for j := range rep.Pipelines[i].Shards {
			sh := &rep.Pipelines[i].Shards[j]
			if sh.Slot = slots[sh.Name]; sh.Slot == "" {
				sh.Slot = defaultSlot(sh.Name)
			}
			names = append(names, sh.Slot)
		}
	}
	active, err := inspect.SlotsActive(ctx, conn, names)
	if err != nil {
		return err
	}
	for i := range rep.Pipelines {
		for j := range rep.Pipelines[i].Shards {
			sh := &rep.Pipelines[i].Shards[j]
			if a, ok := active[sh.Slot]; ok {
				sh.Streamed = &a
				if !a {
					rep.Warnings = append(rep.Warnings, fmt.Sprintf("pipeline %s is not streamed: no relay reads its slot %s, so its "+
						"endpoints receive nothing and the figures below are as of when it stopped; start `outbox-relay run` for it "+
						"(outbox-relay status --pipeline %s shows the slot)", sh.Name, sh.Slot, sh.Name))
				}
			}
		}
	}
	slices.Sort(rep.Warnings)
	return nil
}

// defaultSlot is the slot the relay gives pipeline (or shard) name when none is configured.
func defaultSlot(name string) string {
	if name == relay.DefaultPipeline {
		return relay.DefaultSlot
	}
	return "outbox_relay_" + name
}
