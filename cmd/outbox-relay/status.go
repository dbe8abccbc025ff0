package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/internal/pipeconf"
	"github.com/outbox-relay/outbox-relay/relay"
)

func newStatusCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Report the slot, lag, outbox rows and parked aggregates; exit 1 when unhealthy",
		Long: `Reads the replication slot and the outbox tables (no running relay needed) and prints the
slot's positions and WAL retention, the lag, outbox rows by status, the oldest pending row and
the oldest parked aggregates with the reason they were parked.

Exit codes: 0 healthy; 1 unhealthy (the slot is missing, invalidated, belongs to another
database, or no process streams from it) or the check failed (no connection, tables missing:
run 'outbox-relay migrate'); 2 bad command line. The report is printed in every case where it
could be read, so it works as a probe and for scripts (--json).

With --endpoints it reports the endpoints instead (docs/guides/endpoints-watching.md): one line per
endpoint and pipeline run with endpoints, with the endpoint's state and what the pipeline's
relay last reported about it (rows of outbox_endpoint_status, written when they change; the
shards of a pipeline summed) and how old those figures are, its parked aggregates, and for each
pipeline whether a relay streams its slot (named by --config or --slot, else the relay's default
name) and how long ago it reported, with a warning when nobody streams the slot or its heartbeat
is over a minute old (a stopped relay). One query per table whatever the number of endpoints.
Exit 0 when the report was read: a failing endpoint is not an unhealthy relay.`,
		Example: `  DB_DSN=postgres://relay@db:5432/app outbox-relay status
  outbox-relay status --json --top 50 | jq '.rows.pending'
  outbox-relay status --endpoints --pipeline partners
  outbox-relay status --endpoints --json | jq '.endpoints[] | select(.failures_in_row > 0) | .id'`,
	}
	fs := cmd.Flags()
	addDSNFlag(fs)
	addSchemaFlag(fs)
	fs.String("slot", relay.DefaultSlot, "logical replication slot name (with --endpoints: the default pipeline's)")
	fs.Bool("json", false, "print the report as JSON (stable field names; see docs/operations/delivery.md)")
	fs.Int("top", 10, "parked aggregates to list, oldest first")
	fs.Duration("timeout", 10*time.Second, "give up after this long")
	fs.String(configFlag.name, "", "report every pipeline of this YAML file (env OUTBOX_RELAY_CONFIG), as `run --config` runs them")
	fs.String("pipeline", "", "report only this pipeline")
	fs.Bool("endpoints", false, "report each endpoint instead: its state, undelivered count and age, last success, last error, "+
		"failures in a row and parked aggregates, per pipeline run with endpoints")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		dsn, err := requireDSN(fs)
		if err != nil {
			return err
		}
		if endpoints, _ := fs.GetBool("endpoints"); endpoints {
			return runEndpointStatus(cmd, fs, dsn)
		}
		pipes, fileSchema, err := statusPipelines(fs)
		if err != nil {
			return err
		}
		slot := pipes[0].Slot
		asJSON, _ := fs.GetBool("json")
		top, _ := fs.GetInt("top")
		timeout, _ := fs.GetDuration("timeout")
		if top < 0 || timeout <= 0 {
			return usageError{fmt.Errorf("--top must be 0 or more and --timeout positive")}
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
		defer cancel()
		rep, walWarning, err := readStatus(ctx, dsn, schemaName(fs, fileSchema), slot, top)
		if err != nil {
			return err
		}
		warnings := rep.Warnings()
		if walWarning != "" {
			warnings = append([]string{walWarning}, warnings...)
		}
		narrowed := fs.Changed("pipeline")
		ps, unused, err := readPipelines(ctx, dsn, rep.Schema, pipes, !narrowed)
		if err != nil {
			return err
		}
		for _, s := range unused.Slots {
			warnings = append(warnings, fmt.Sprintf("slot %q is named by this relay but no pipeline uses it: it retains WAL; "+
				"`outbox-relay drop-pipeline NAME` removes it (pass --config to check against your pipelines)", s))
		}
		for _, p := range unused.Publications {
			warnings = append(warnings, fmt.Sprintf("publication %q is named by this relay but no pipeline uses it", p))
		}
		if conn, err := pgx.Connect(ctx, dsn); err == nil {
			warnings = append(warnings, control.ReshardWarnings(ctx, conn, rep.Schema)...)
			conn.Close(context.Background())
		}
		if asJSON {
			err = writeStatusJSON(cmd.OutOrStdout(), rep, warnings, ps, unused)
		} else {
			err = writeStatusTable(cmd.OutOrStdout(), rep, warnings)
			if err == nil {
				err = writePipelines(cmd.OutOrStdout(), ps)
			}
		}
		if err != nil {
			return err
		}
		if ok, why := rep.Healthy(); !ok {
			return fmt.Errorf("unhealthy: %s", why)
		}
		for _, p := range ps {
			if !p.Healthy {
				return fmt.Errorf("unhealthy: pipeline %q: %s", p.Name, p.Reason)
			}
		}
		return nil
	}
	return cmd
}

// readStatus reads the report of the relay's tables in schema s (named, or "" for
// current_schema()), and a warning when the server's wal_level is not logical.
func readStatus(ctx context.Context, dsn, s, slot string, top int) (inspect.Report, string, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return inspect.Report{}, "", fmt.Errorf("bad DSN: %w", err)
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = "outbox-relay status"
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return inspect.Report{}, "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	walWarning, err := walLevelWarning(ctx, conn)
	if err != nil {
		return inspect.Report{}, "", err
	}
	rep, err := inspect.Status(ctx, conn, s, slot, top)
	return rep, walWarning, err
}

// walLevelWarning returns a warning naming the fix when the server cannot decode logically
// (wal_level is not logical), or "" when it can.
func walLevelWarning(ctx context.Context, conn *pgx.Conn) (string, error) {
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return "", fmt.Errorf("read wal_level: %w", err)
	}
	if level == "logical" {
		return "", nil
	}
	return fmt.Sprintf("wal_level is %s, but the relay needs logical: run ALTER SYSTEM SET wal_level = logical "+
		"(or set it in postgresql.conf) and restart PostgreSQL", level), nil
}

// statusJSON is the --json document: the health verdict, then the report's fields (of the
// first pipeline's slot), then every pipeline and the unused slots and publications.
type statusJSON struct {
	Healthy  bool     `json:"healthy"`
	Reason   string   `json:"reason"`
	Warnings []string `json:"warnings"`
	inspect.Report
	Pipelines []inspect.PipelineStatus `json:"pipelines"`
	Unused    unusedJSON               `json:"unused"`
}

// unusedJSON lists slots and publications named by this relay that no pipeline uses.
type unusedJSON struct {
	Slots        []string `json:"slots"`
	Publications []string `json:"publications"`
}

// statusPipelines returns the pipelines status reports: those of --config, or the one the
// flags describe; narrowed to --pipeline. It also returns the file's schema:, if any.
func statusPipelines(fs *pflag.FlagSet) ([]relay.Pipeline, string, error) {
	var pipes []relay.Pipeline
	fileSchema := ""
	if path := stringFrom(fs, configFlag); path != "" {
		file, err := pipeconf.Load(path)
		if err != nil {
			return nil, "", usageError{err}
		}
		fileSchema = file.Schema
		for _, p := range file.Pipelines {
			for _, s := range p.ShardPipelines() {
				pipes = append(pipes, s.WithDefaults())
			}
		}
		if fs.Changed("slot") {
			return nil, "", usageError{fmt.Errorf("--slot and --config: each pipeline names its slot in %s; use --pipeline NAME", path)}
		}
	} else {
		slot, _ := fs.GetString("slot")
		pipes = []relay.Pipeline{{Name: relay.DefaultPipeline, Slot: slot}}
	}
	name, _ := fs.GetString("pipeline")
	if name == "" {
		return pipes, fileSchema, nil
	}
	var named []relay.Pipeline
	for _, p := range pipes {
		if p.Name == name || p.Family() == name { // a sharded pipeline's name: all its shards
			named = append(named, p)
		}
	}
	if len(named) > 0 {
		return named, fileSchema, nil
	}
	return nil, "", usageError{fmt.Errorf("--pipeline %q: no such pipeline (pass --config with the file that names it)", name)}
}

// readPipelines reads each pipeline's status and, if withUnused, the slots and publications no
// pipeline uses.
func readPipelines(ctx context.Context, dsn, s string, pipes []relay.Pipeline, withUnused bool) ([]inspect.PipelineStatus, unusedJSON, error) {
	out, unused := []inspect.PipelineStatus{}, unusedJSON{Slots: []string{}, Publications: []string{}}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return out, unused, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	var slots, pubs []string
	for _, p := range pipes {
		st, err := inspect.PipelineOf(ctx, conn, s, p.Name, p.Slot, p.Publication)
		if err != nil {
			return out, unused, err
		}
		out = append(out, st)
		slots, pubs = append(slots, p.Slot), append(pubs, p.Publication)
	}
	if withUnused {
		s, pb, err := inspect.Unused(ctx, conn, slots, pubs)
		if err != nil {
			return out, unused, err
		}
		if len(pipes) == 1 && pipes[0].Publication == "" {
			pb = nil // the flag path does not know its publication's name
		}
		unused.Slots, unused.Publications = append(unused.Slots, s...), append(unused.Publications, pb...)
	}
	return out, unused, nil
}

// writePipelines prints one line per pipeline.
func writePipelines(w io.Writer, ps []inspect.PipelineStatus) error {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PIPELINE\tSLOT\tACTIVE\tLAG\tPARKED\tFAILED\tABANDONED\tFILTER\tHEALTH")
	for _, p := range ps {
		health := "healthy"
		if !p.Healthy {
			health = "UNHEALTHY: " + p.Reason
		}
		filter := "-"
		if p.Filter != nil {
			filter = *p.Filter
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%s\t%d\t%d\t%d\t%s\t%s\n", p.Name, p.Slot.Name, p.Slot.Active, bytesOrNull(p.Slot.LagBytes),
			p.ParkedAggregates, p.FailedEvents, p.AbandonedEvents, oneLine(filter, 60), oneLine(health, 100))
	}
	return tw.Flush()
}

func writeStatusJSON(w io.Writer, r inspect.Report, warnings []string, ps []inspect.PipelineStatus, unused unusedJSON) error {
	ok, why := r.Healthy()
	for _, p := range ps {
		if ok && !p.Healthy {
			ok, why = false, fmt.Sprintf("pipeline %q: %s", p.Name, p.Reason)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(statusJSON{Healthy: ok, Reason: why, Warnings: warnings, Report: r, Pipelines: ps, Unused: unused})
}

func writeStatusTable(w io.Writer, r inspect.Report, warnings []string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(tw, strings.Join(cells, "\t")) }
	if ok, why := r.Healthy(); ok {
		row("health", "healthy")
	} else {
		row("health", "UNHEALTHY: "+why)
	}
	for _, warn := range warnings {
		row("warning", warn)
	}
	srv := r.Server.Version
	if r.Server.InRecovery {
		srv += " (standby)"
	}
	row("server", "PostgreSQL "+srv)
	row("schema", r.Schema)
	if t := r.Server.IdleReplicationSlotTimeout; t != nil {
		row("idle_replication_slot_timeout", *t)
	}
	writeSlot(row, r.Slot)
	row("")
	row("OUTBOX ROWS")
	for _, s := range sortedStatuses(r.Rows) {
		row("  "+s, fmt.Sprint(r.Rows[s]))
	}
	if p := r.OldestPending; p != nil {
		row("  oldest pending", fmt.Sprintf("%s old (id %s, created %s)", age(p.AgeSeconds), p.ID, clock(p.CreatedAt)))
	} else {
		row("  oldest pending", "none")
	}
	writeControl(row, r.Control)
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeParked(w, r)
}

// writeControl shows each pipeline with a control row: paused since when and why, or running.
func writeControl(row func(...string), list []inspect.PipelineControl) {
	if len(list) == 0 {
		return
	}
	row("")
	row("PAUSE CONTROL")
	for _, p := range list {
		state := "running"
		if p.Paused {
			state = "PAUSED"
			if p.PausedAt != nil {
				state += " since " + clock(*p.PausedAt)
			}
			state += ": " + oneLine(p.Reason, 100)
		}
		row("  "+p.Name, state)
	}
}

func writeSlot(row func(...string), s inspect.Slot) {
	row("")
	row("SLOT", s.Name)
	if !s.Exists {
		row("  exists", "no")
		return
	}
	if !s.SameDatabase || s.Plugin != "pgoutput" {
		row("  owner", fmt.Sprintf("%s slot of database %s", s.Plugin, s.Database))
	}
	active := "no"
	if s.Active && s.ActivePID != nil {
		active = fmt.Sprintf("yes (pid %d)", *s.ActivePID)
	}
	row("  active", active)
	row("  wal_status", orNull(s.WALStatus))
	row("  confirmed_flush_lsn", orNull(s.ConfirmedFlushLSN))
	row("  restart_lsn", orNull(s.RestartLSN))
	row("  retained WAL", bytesOrNull(s.RetainedWALBytes))
	if s.SafeWALSize == nil {
		row("  safe_wal_size", "unlimited")
	} else {
		row("  safe_wal_size", humanBytes(*s.SafeWALSize))
	}
	row("  lag", bytesOrNull(s.LagBytes))
	// Columns of newer servers: shown only where the server has them.
	if s.Conflicting != nil {
		row("  conflicting", fmt.Sprint(*s.Conflicting))
	}
	if s.InvalidationReason != nil {
		row("  invalidation_reason", *s.InvalidationReason)
	}
	if s.InactiveSince != nil {
		row("  inactive_since", clock(*s.InactiveSince))
	}
	if s.Failover != nil {
		row("  failover", fmt.Sprint(*s.Failover))
	}
	if s.Synced != nil {
		synced := fmt.Sprint(*s.Synced)
		if *s.Synced && s.Temporary {
			synced += " (temporary: not yet usable after a promotion)"
		}
		row("  synced", synced)
	}
}

func writeParked(w io.Writer, r inspect.Report) error {
	fmt.Fprintln(w)
	if r.ParkedAggregates == 0 {
		_, err := fmt.Fprintln(w, "PARKED AGGREGATES  none")
		return err
	}
	fmt.Fprintf(w, "PARKED AGGREGATES  %d (oldest %d shown)\n", r.ParkedAggregates, len(r.Parked))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  AGGREGATE\tPARKED AT\tHELD\tFIRST EVENT\tREASON")
	for _, p := range r.Parked {
		fmt.Fprintf(tw, "  %s/%s\t%s\t%d\t%s\t%s\n", p.AggregateType, p.AggregateID, clock(p.ParkedAt), p.ParkedEvents,
			p.FirstEventID, oneLine(p.Reason, 100))
	}
	return tw.Flush()
}

// sortedStatuses lists the four known statuses in lifecycle order, then any others.
func sortedStatuses(rows map[string]int64) []string {
	list := []string{"pending", "done", "failed", "parked"}
	for s := range rows {
		if s != "pending" && s != "done" && s != "failed" && s != "parked" {
			list = append(list, s)
		}
	}
	return list
}

func orNull(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

func bytesOrNull(n *int64) string {
	if n == nil {
		return "null"
	}
	return humanBytes(*n)
}

// humanBytes formats n in binary units, e.g. "1.5 MiB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for (v >= unit || v <= -unit) && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[i])
}

func age(seconds float64) string {
	return time.Duration(seconds * float64(time.Second)).Round(time.Second).String()
}

func clock(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

// oneLine flattens s to one line of at most n runes, for a table cell.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
