package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/internal/pipeconf"
	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/relay"
)

// staleStatus is how old a pipeline's heartbeat may be before status --endpoints says its relay
// stopped reporting: the relay writes it every few seconds.
const staleStatus = time.Minute

// heartbeatID is the endpoint id of a pipeline's heartbeat row in outbox_endpoint_status,
// written at every save whatever changed (as the versions log's bootstrap marker, no endpoint
// has this id). The relay writes an endpoint's row only when its figures change, so without a
// heartbeat an old updated_at means "quiet" as well as "stopped".
const heartbeatID = ""

// endpointReport is `status --endpoints`: the pipelines with endpoints, how recently each shard
// reported, and one line per (pipeline, endpoint).
type endpointReport struct {
	Warnings  []string             `json:"warnings"`
	Pipelines []endpointPipeline   `json:"pipelines"`
	Totals    map[string]int       `json:"totals"` // endpoints by state, failing, parked
	Endpoints []endpointStatusLine `json:"endpoints"`
	now       time.Time            // the database's clock, which wrote updated_at
}

// endpointPipeline is a pipeline that runs with endpoints: its shards (itself when not sharded)
// and when each last wrote its lanes' status.
type endpointPipeline struct {
	Name   string          `json:"name"`
	Shards []endpointShard `json:"shards"`
}

type endpointShard struct {
	Name string `json:"name"`
	// ReportedAt is its heartbeat's time when it writes one (Heartbeat), else the newest of its
	// status rows; null: none yet.
	ReportedAt *time.Time `json:"reported_at"`
	AgeSeconds *float64   `json:"age_seconds"`
	Heartbeat  bool       `json:"heartbeat"`
	// Stale: its heartbeat is over a minute old, so its relay is stopped or cannot write.
	Stale bool `json:"stale"`
	// Slot is its slot's name (from --config, --slot, or the relay's default), and Streamed
	// whether a process streams from it: null when no such slot exists.
	Slot     string `json:"slot"`
	Streamed *bool  `json:"streamed"`
}

// endpointStatusLine is one endpoint in one pipeline: its state, then what its lanes (one per
// shard) last reported, summed.
type endpointStatusLine struct {
	Pipeline   string     `json:"pipeline"` // "" when no pipeline has run with endpoints yet
	ID         string     `json:"id"`
	TenantID   *string    `json:"tenant_id"`
	State      string     `json:"state"` // enabled, paused, disabled; removed: reported, but no longer a row
	Reason     string     `json:"reason"`
	StateSince *time.Time `json:"state_since"`
	laneTotal
	ParkedAggregates int64 `json:"parked_aggregates"`
}

// laneTotal is what an endpoint's lanes reported, over the shards of a pipeline: counts summed,
// the oldest undelivered and the oldest report, the latest success and error, the longest run
// of failures.
type laneTotal struct {
	Undelivered              int64      `json:"undelivered"`
	OldestUndeliveredAt      *time.Time `json:"oldest_undelivered_at"`
	OldestUndeliveredSeconds *float64   `json:"oldest_undelivered_seconds"`
	LastSuccessAt            *time.Time `json:"last_success_at"`
	LastError                string     `json:"last_error"`
	LastErrorAt              *time.Time `json:"last_error_at"`
	FailuresInRow            int        `json:"failures_in_row"`
	// ReportedAt is the oldest updated_at of the endpoint's status rows, the time its figures
	// are as of (null: never reported); the oldest, so that one shard's old figures show.
	ReportedAt        *time.Time `json:"reported_at"`
	ReportedAgeSecond *float64   `json:"reported_age_seconds"`
}

func (l *laneTotal) add(s state.EndpointStatus) {
	l.Undelivered += s.Undelivered
	l.OldestUndeliveredAt = earliest(l.OldestUndeliveredAt, s.OldestUndelivered)
	l.LastSuccessAt = latest(l.LastSuccessAt, s.LastSuccess)
	if !s.LastErrorAt.IsZero() && (l.LastErrorAt == nil || s.LastErrorAt.After(*l.LastErrorAt)) {
		l.LastError, l.LastErrorAt = s.LastError, &s.LastErrorAt
	}
	l.FailuresInRow = max(l.FailuresInRow, s.FailuresInRow)
	l.ReportedAt = earliest(l.ReportedAt, s.UpdatedAt)
}

// shardName is a shard's name as relay.ShardName makes it: <pipeline>_s<i>of<n>.
var shardName = regexp.MustCompile(`^(.+)_s(\d+)of(\d+)$`)

// familyOf returns the pipeline a shard was split from, or name itself.
func familyOf(name string) string {
	m := shardName.FindStringSubmatch(name)
	if m == nil {
		return name
	}
	i, err1 := strconv.Atoi(m[2])
	n, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || i >= n {
		return name
	}
	return m[1]
}

// runEndpointStatus is `status --endpoints`.
func runEndpointStatus(cmd *cobra.Command, fs *pflag.FlagSet, dsn string) error {
	for _, f := range []string{"top"} {
		if fs.Changed(f) {
			return usageError{fmt.Errorf("--endpoints and --%s do not go together: --endpoints reports every pipeline with endpoints (narrow it with --pipeline NAME)", f)}
		}
	}
	fileSchema, slots := "", map[string]string{}
	if path := stringFrom(fs, configFlag); path != "" { // its schema and slots: the report lists what the tables hold
		file, err := pipeconf.Load(path)
		if err != nil {
			return usageError{err}
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

// readEndpointReport reads the four tables, one query each, and merges them.
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
	return buildEndpointReport(rep.now, states, lanes, pipes, parked), nil
}

// buildEndpointReport merges the rows: one line per endpoint and pipeline (the family of its
// shards), every endpoint of the table in every pipeline with endpoints, and the endpoints a
// pipeline reported that are no longer rows as removed.
func buildEndpointReport(now time.Time, states []state.EndpointState, lanes []state.EndpointStatus, pipes []string,
	parked map[string]int64) endpointReport {
	rep := endpointReport{now: now, Warnings: []string{}, Pipelines: []endpointPipeline{}, Endpoints: []endpointStatusLine{},
		Totals: map[string]int{"enabled": 0, "paused": 0, "disabled": 0, "failing": 0}}
	shards := map[string]*endpointShard{}
	for _, p := range pipes {
		shards[p] = &endpointShard{Name: p}
	}
	for lane := range parked { // a lane's dead letters outlive its status rows
		if p, _, _ := strings.Cut(lane, "/"); shards[p] == nil {
			shards[p] = &endpointShard{Name: p}
		}
	}
	type key struct{ family, id string }
	totals := map[key]*laneTotal{}
	for _, l := range lanes {
		sh := shards[l.Pipeline]
		if sh == nil {
			sh = &endpointShard{Name: l.Pipeline}
			shards[l.Pipeline] = sh
		}
		if l.EndpointID == heartbeatID {
			if !sh.Heartbeat {
				sh.ReportedAt = nil
			}
			sh.Heartbeat, sh.ReportedAt = true, latest(sh.ReportedAt, l.UpdatedAt)
			continue
		}
		if !sh.Heartbeat {
			sh.ReportedAt = latest(sh.ReportedAt, l.UpdatedAt)
		}
		k := key{familyOf(l.Pipeline), l.EndpointID}
		if totals[k] == nil {
			totals[k] = &laneTotal{}
		}
		totals[k].add(l)
	}
	families := rep.addPipelines(shards)
	known := map[string]bool{}
	for _, e := range states {
		known[e.ID] = true
		rep.Totals[e.State]++
	}
	if len(families) == 0 {
		families = []string{""}
		if len(states) > 0 {
			rep.Warnings = append(rep.Warnings, "no pipeline has run with endpoints yet: start one with `outbox-relay run --endpoints` "+
				"(or endpoints: true in the pipelines file)")
		}
	}
	for _, f := range families {
		for _, e := range states {
			rep.Endpoints = append(rep.Endpoints, line(f, e, totals[key{f, e.ID}]))
		}
	}
	for k, t := range totals {
		if !known[k.id] {
			rep.Endpoints = append(rep.Endpoints, line(k.family, state.EndpointState{ID: k.id, State: "removed"}, t))
		}
	}
	rep.finish(parked)
	return rep
}

// addPipelines groups the shards into pipelines, sorted, marks stale shards with a warning,
// and returns the pipelines' names.
func (rep *endpointReport) addPipelines(shards map[string]*endpointShard) []string {
	byFamily := map[string][]endpointShard{}
	for _, sh := range shards {
		if sh.ReportedAt != nil {
			age := rep.now.Sub(*sh.ReportedAt).Seconds()
			sh.AgeSeconds, sh.Stale = &age, sh.Heartbeat && age > staleStatus.Seconds()
		}
		if sh.Stale {
			rep.Warnings = append(rep.Warnings, staleWarning(*sh, rep.now))
		}
		f := familyOf(sh.Name)
		byFamily[f] = append(byFamily[f], *sh)
	}
	var families []string
	for f, list := range byFamily {
		slices.SortFunc(list, func(a, b endpointShard) int { return strings.Compare(a.Name, b.Name) })
		rep.Pipelines = append(rep.Pipelines, endpointPipeline{Name: f, Shards: list})
		families = append(families, f)
	}
	slices.SortFunc(rep.Pipelines, func(a, b endpointPipeline) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(rep.Warnings)
	slices.Sort(families)
	return families
}

func staleWarning(sh endpointShard, now time.Time) string {
	return fmt.Sprintf("pipeline %s last reported its endpoints' status %s ago: its relay is stopped or cannot write "+
		"(outbox-relay status --pipeline %s); the figures below are as of then", sh.Name, age(now.Sub(*sh.ReportedAt).Seconds()), sh.Name)
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

// shardLine says how fresh a shard's figures are, and whether its slot is streamed.
func shardLine(sh endpointShard) string {
	line := freshness(sh)
	switch {
	case sh.Streamed == nil:
		return line + "; no slot " + sh.Slot + " (name the pipeline's slot with --config or --slot)"
	case *sh.Streamed:
		return line + "; slot " + sh.Slot + " streamed"
	}
	return line + "; slot " + sh.Slot + " NOT STREAMED"
}

func freshness(sh endpointShard) string {
	switch {
	case sh.ReportedAt == nil:
		return fmt.Sprintf("pipeline %s: no figures yet (its relay writes an endpoint's figures when they change)", sh.Name)
	case sh.Heartbeat && !sh.Stale:
		return fmt.Sprintf("pipeline %s: reported %s ago", sh.Name, age(*sh.AgeSeconds))
	case sh.Heartbeat:
		return fmt.Sprintf("pipeline %s: STALE, last reported %s ago", sh.Name, age(*sh.AgeSeconds))
	}
	return fmt.Sprintf("pipeline %s: figures last changed %s ago (written when they change)", sh.Name, age(*sh.AgeSeconds))
}

func line(family string, e state.EndpointState, t *laneTotal) endpointStatusLine {
	l := endpointStatusLine{Pipeline: family, ID: e.ID, State: e.State, Reason: e.Reason}
	if e.TenantID != "" {
		l.TenantID = &e.TenantID
	}
	if !e.Since.IsZero() {
		l.StateSince = &e.Since
	}
	if t != nil {
		l.laneTotal = *t
	}
	return l
}

// finish adds the parked aggregates of each line's lanes (P/E for P the pipeline or one of its
// shards), the ages, the failing total, and sorts the lines by pipeline and id.
func (rep *endpointReport) finish(parked map[string]int64) {
	parkedBy := map[[2]string]int64{}
	for lane, n := range parked {
		p, id, _ := strings.Cut(lane, "/")
		parkedBy[[2]string{familyOf(p), id}] += n
	}
	for i := range rep.Endpoints {
		l := &rep.Endpoints[i]
		l.ParkedAggregates = parkedBy[[2]string{l.Pipeline, l.ID}]
		l.OldestUndeliveredSeconds = ageOf(rep.now, l.OldestUndeliveredAt)
		l.ReportedAgeSecond = ageOf(rep.now, l.ReportedAt)
		if l.FailuresInRow > 0 || l.ParkedAggregates > 0 {
			rep.Totals["failing"]++
		}
	}
	slices.SortFunc(rep.Endpoints, func(a, b endpointStatusLine) int {
		return cmp.Or(strings.Compare(a.Pipeline, b.Pipeline), strings.Compare(a.ID, b.ID))
	})
}

// only narrows the report to pipeline name (a pipeline, or one shard of it).
func (rep endpointReport) only(name string) (endpointReport, error) {
	var names []string
	for _, p := range rep.Pipelines {
		names = append(names, p.Name)
		if p.Name == name {
			rep.Pipelines = []endpointPipeline{p}
			rep.Endpoints = slices.DeleteFunc(rep.Endpoints, func(l endpointStatusLine) bool { return l.Pipeline != name })
			rep.Warnings = slices.DeleteFunc(rep.Warnings, func(w string) bool {
				return strings.HasPrefix(w, "pipeline ") && familyOf(strings.Fields(w)[1]) != name
			})
			return rep, nil
		}
	}
	if f := familyOf(name); f != name && slices.Contains(names, f) {
		return rep, usageError{fmt.Errorf("--pipeline %s is a shard: status --endpoints sums the shards of a pipeline; use --pipeline %s", name, f)}
	}
	if len(names) == 0 {
		return rep, usageError{fmt.Errorf("--pipeline %s: no pipeline has run with endpoints yet (outbox-relay run --endpoints)", name)}
	}
	return rep, usageError{fmt.Errorf("--pipeline %s: no such pipeline with endpoints; those with endpoints: %s", name, strings.Join(names, ", "))}
}

// writeEndpointReport prints the summary, the warnings, then one line per endpoint.
func writeEndpointReport(w io.Writer, rep endpointReport) error {
	t := rep.Totals
	fmt.Fprintf(w, "ENDPOINTS  %d enabled, %d paused, %d disabled; %d failing or parked\n",
		t["enabled"], t["paused"], t["disabled"], t["failing"])
	for _, p := range rep.Pipelines {
		for _, sh := range p.Shards {
			fmt.Fprintln(w, shardLine(sh))
		}
	}
	for _, warn := range rep.Warnings {
		fmt.Fprintln(w, "warning: "+warn)
	}
	if len(rep.Endpoints) == 0 {
		_, err := fmt.Fprintln(w, "no endpoints: `outbox-relay endpoint add` adds one")
		return err
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PIPELINE\tENDPOINT\tSTATE\tUNDELIVERED\tOLDEST\tLAST SUCCESS\tFAILURES\tPARKED\tLAST ERROR\tAS OF")
	for _, l := range rep.Endpoints {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\t%s\n", or(l.Pipeline, "-"), l.ID, stateCell(l), l.Undelivered,
			ageCell(l.OldestUndeliveredSeconds, "-", ""), agoCell(rep.now, l.LastSuccessAt, "never"), l.FailuresInRow,
			l.ParkedAggregates, errorCell(rep.now, l), ageCell(l.ReportedAgeSecond, "never", " ago"))
	}
	return tw.Flush()
}

func stateCell(l endpointStatusLine) string {
	if l.Reason == "" {
		return l.State
	}
	return l.State + ": " + oneLine(l.Reason, 40)
}

func errorCell(now time.Time, l endpointStatusLine) string {
	if l.LastErrorAt == nil {
		return "-"
	}
	return agoCell(now, l.LastErrorAt, "") + ": " + oneLine(l.LastError, 60)
}

func agoCell(now time.Time, t *time.Time, none string) string {
	return ageCell(ageOf(now, t), none, " ago")
}

func ageCell(seconds *float64, none, suffix string) string {
	if seconds == nil {
		return none
	}
	return age(*seconds) + suffix
}

func ageOf(now time.Time, t *time.Time) *float64 {
	if t == nil {
		return nil
	}
	s := max(now.Sub(*t).Seconds(), 0)
	return &s
}

// earliest and latest keep the earlier (later) of a kept time and t; a zero t is NULL.
func earliest(kept *time.Time, t time.Time) *time.Time {
	if t.IsZero() || (kept != nil && !t.Before(*kept)) {
		return kept
	}
	return &t
}

func latest(kept *time.Time, t time.Time) *time.Time {
	if t.IsZero() || (kept != nil && !t.After(*kept)) {
		return kept
	}
	return &t
}
