package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/pipeconf"
	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/relay"
)

func newReshardCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reshard",
		Short: "Change a pipeline's shard count while producers write, losing and reordering nothing",
		Long: `Changes pipeline NAME (from --config) to --to shards, in four steps, each recorded in
outbox_reshard and shown by status; re-running after an interruption continues where it stopped:
1. create the new shards' publications and slots, record the highest of their start positions as
   the fence F, and advance every new slot to F (the new shards skip what committed at or before F);
2. wait until every old slot has confirmed F: the old shards' relays deliver up to it and retire by
   themselves, while the new shards' relays (already started with shards: --to, or started now)
   deliver nothing until then;
3. drop the old shards' slots and publications, once no relay streams them (a log line each);
4. mark the reshard done. Relays refuse a shards: that contradicts it from then on.
docs/guides/shards.md, Changing N.`,
		Example: `  outbox-relay reshard --config relay.yaml --pipeline orders --to 4 --dry-run
  outbox-relay reshard --config relay.yaml --pipeline orders --to 4`,
	}
	fs := cmd.Flags()
	addDSNFlag(fs)
	addSchemaFlag(fs)
	fs.String(configFlag.name, "", "the pipelines file that names the pipeline (env OUTBOX_RELAY_CONFIG; required)")
	fs.String("pipeline", "", "the pipeline to reshard (required)")
	fs.Int("to", 0, "the new shard count, 1 to 256 (required)")
	fs.Bool("dry-run", false, "print the plan and the current step; change nothing")
	fs.Duration("wait", 10*time.Minute, "how long to wait for the old shards to reach the fence and let go of their slots; re-run to wait more")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		rc, err := reshardArgs(fs)
		if err != nil {
			return err
		}
		conn, s, err := connectSchema(cmd.Context(), fs, rc.dsn, rc.fileSchema)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		rc.schema = s
		return rc.run(cmd.Context(), conn, cmd.OutOrStdout())
	}
	return cmd
}

type reshardCmd struct {
	dsn        string
	fileSchema string         // the file's schema:
	schema     string         // the relay's tables' schema, resolved
	p          relay.Pipeline // the pipeline from the file, unsharded view
	to         int
	dryRun     bool
	wait       time.Duration
}

func reshardArgs(fs *pflag.FlagSet) (reshardCmd, error) {
	rc := reshardCmd{}
	var err error
	if rc.dsn, err = requireDSN(fs); err != nil {
		return rc, err
	}
	path := stringFrom(fs, configFlag)
	name, _ := fs.GetString("pipeline")
	rc.to, _ = fs.GetInt("to")
	rc.dryRun, _ = fs.GetBool("dry-run")
	rc.wait, _ = fs.GetDuration("wait")
	if path == "" || name == "" || rc.to < 1 || rc.to > relay.MaxShards {
		return rc, usageError{errors.New("reshard needs --config FILE --pipeline NAME --to N (N from 1 to 256)")}
	}
	file, err := pipeconf.Load(path)
	if err != nil {
		return rc, usageError{err}
	}
	rc.fileSchema = file.Schema
	for _, p := range file.Pipelines {
		if p.Name == name {
			p.Shards, p.Shard = 0, nil
			rc.p = p
			return rc, nil
		}
	}
	return rc, usageError{fmt.Errorf("--pipeline %q: no such pipeline in %s", name, path)}
}

// shards returns the pipelines of n shards of rc.p, defaults applied.
func (rc reshardCmd) shards(n int) []relay.Pipeline {
	p := rc.p
	p.Shards = n
	var out []relay.Pipeline
	for _, s := range p.ShardPipelines() {
		out = append(out, s.WithDefaults())
	}
	return out
}

var shardSuffix = regexp.MustCompile(`_s[0-9]+of([0-9]+)$`)

// currentShards returns the shard count the family's existing slots say (0: no slot).
func (rc reshardCmd) currentShards(ctx context.Context, conn *pgx.Conn) (int, error) {
	rows, err := conn.Query(ctx, `SELECT slot_name FROM pg_replication_slots WHERE database = current_database()`)
	if err != nil {
		return 0, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	base := rc.p.WithDefaults().Slot
	found := 0
	for _, s := range names {
		n := 0
		if s == base {
			n = 1
		} else if m := shardSuffix.FindStringSubmatch(s); m != nil && s[:len(s)-len(m[0])] == base {
			n, _ = strconv.Atoi(m[1])
		}
		if n != 0 && found != 0 && n != found {
			return 0, fmt.Errorf("pipeline %q has slots of %d and of %d shards and no reshard under way: drop the stray ones "+
				"with drop-pipeline", rc.p.Name, found, n)
		}
		if n != 0 {
			found = n
		}
	}
	return found, nil
}

func names(ps []relay.Pipeline, f func(relay.Pipeline) string) []string {
	var out []string
	for _, p := range ps {
		out = append(out, f(p))
	}
	return out
}

// start returns the reshard row, inserting it when there is none under way.
func (rc reshardCmd) start(ctx context.Context, conn *pgx.Conn, w io.Writer) (relay.Reshard, bool, error) {
	rs, ok, err := relay.ReadReshard(ctx, conn, rc.schema, rc.p.Name)
	if err != nil {
		return rs, false, err
	}
	if ok && rs.Finished == nil {
		if rs.To != rc.to {
			return rs, false, fmt.Errorf("a reshard of %q from %d to %d shards is under way: finish it (--to %d) first",
				rc.p.Name, rs.From, rs.To, rs.To)
		}
		return rs, true, nil
	}
	from, err := rc.currentShards(ctx, conn)
	if err != nil {
		return rs, false, err
	}
	switch {
	case from == 0:
		return rs, false, fmt.Errorf("pipeline %q has no slot yet: set shards: %d in the file and start the relays", rc.p.Name, rc.to)
	case from == rc.to:
		fmt.Fprintf(w, "pipeline %s already has %d shards; nothing to do\n", rc.p.Name, rc.to)
		return rs, false, nil
	}
	old, now := rc.shards(from), rc.shards(rc.to)
	rs = relay.Reshard{Pipeline: rc.p.Name, From: from, To: rc.to,
		OldSlots: names(old, func(p relay.Pipeline) string { return p.Slot }),
		OldPubs:  names(old, func(p relay.Pipeline) string { return p.Publication }),
		NewSlots: names(now, func(p relay.Pipeline) string { return p.Slot })}
	fmt.Fprintf(w, "pipeline %s: reshard %d -> %d; old slots %v, new slots %v\n", rc.p.Name, from, rc.to, rs.OldSlots, rs.NewSlots)
	if rc.dryRun {
		return rs, false, nil
	}
	_, err = conn.Exec(ctx, schema.SQL(rc.schema, `INSERT INTO {outbox_reshard} (pipeline, from_shards, to_shards, old_slots, old_pubs, new_slots)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (pipeline) DO UPDATE SET from_shards = $2, to_shards = $3, old_slots = $4, old_pubs = $5,
			new_slots = $6, fence = NULL, started_at = now(), fence_reached_at = NULL, finished_at = NULL
		WHERE outbox_reshard.finished_at IS NOT NULL`), rs.Pipeline, rs.From, rs.To, rs.OldSlots, rs.OldPubs, rs.NewSlots)
	if err != nil {
		return rs, false, fmt.Errorf("record the reshard: %w", err)
	}
	rs, ok, err = relay.ReadReshard(ctx, conn, rc.schema, rc.p.Name)
	return rs, ok && rs.Finished == nil, err
}

func (rc reshardCmd) run(ctx context.Context, conn *pgx.Conn, w io.Writer) error {
	rs, going, err := rc.start(ctx, conn, w)
	if err != nil || !going {
		return err
	}
	fmt.Fprintf(w, "%s\n", describeReshard(ctx, conn, rc.schema, rs))
	if rc.dryRun {
		return nil
	}
	if rs, err = rc.fence(ctx, conn, w, rs); err != nil {
		return err
	}
	if err := rc.waitOld(ctx, conn, w, rs); err != nil {
		return err
	}
	if err := rc.dropOld(ctx, conn, w, rs); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, schema.SQL(rc.schema, `UPDATE {outbox_reshard} SET finished_at = now() WHERE pipeline = $1`), rs.Pipeline); err != nil {
		return fmt.Errorf("mark the reshard done: %w", err)
	}
	fmt.Fprintf(w, "step 4/4: pipeline %s has %d shards; set shards: %d in every relay's file\n", rs.Pipeline, rs.To, rs.To)
	return nil
}

// fence is step 1: the new publications and slots, the fence, the slots advanced to it.
func (rc reshardCmd) fence(ctx context.Context, conn *pgx.Conn, w io.Writer, rs relay.Reshard) (relay.Reshard, error) {
	for _, p := range rc.shards(rs.To) {
		if _, err := cdc.Setup(ctx, rc.dsn, p.Slot, p.Publication, cdc.SetupOptions{Schema: rc.schema, NoBackfill: true, Filter: p.Filter}); err != nil {
			return rs, fmt.Errorf("create shard %s: %w", p.Name, err)
		}
	}
	if rs.Fence == "" {
		if _, err := conn.Exec(ctx, schema.SQL(rc.schema, `UPDATE {outbox_reshard} SET fence = (SELECT max(confirmed_flush_lsn) FROM pg_replication_slots
			WHERE slot_name = ANY($2)) WHERE pipeline = $1 AND fence IS NULL`), rs.Pipeline, rs.NewSlots); err != nil {
			return rs, fmt.Errorf("record the fence: %w", err)
		}
		var err error
		if rs, _, err = relay.ReadReshard(ctx, conn, rc.schema, rs.Pipeline); err != nil {
			return rs, err
		}
	}
	for _, s := range rs.NewSlots {
		// A slot a new relay already streams is not advanced; its shard skips nothing then, and
		// what it re-sends up to the fence is a duplicate, in order.
		if _, err := conn.Exec(ctx, `SELECT pg_replication_slot_advance(slot_name, $2::pg_lsn) FROM pg_replication_slots
			WHERE slot_name = $1 AND NOT active AND confirmed_flush_lsn < $2::pg_lsn`, s, rs.Fence); err != nil {
			fmt.Fprintf(w, "slot %s not advanced to the fence (%v); its shard re-sends a few events\n", s, err)
		}
	}
	fmt.Fprintf(w, "step 1/4: new slots %v created; fence %s\n", rs.NewSlots, rs.Fence)
	return rs, nil
}

// waitOld is step 2: every old slot confirmed the fence, recorded as reached. An old slot
// dropped by hand before that stops the command, naming the fix: nothing is lost while the new
// shards wait.
func (rc reshardCmd) waitOld(ctx context.Context, conn *pgx.Conn, w io.Writer, rs relay.Reshard) error {
	deadline := time.Now().Add(rc.wait)
	var last []string
	for {
		p, err := relay.RecordFence(ctx, conn, rc.schema, rs)
		switch {
		case err != nil:
			return fmt.Errorf("read the old slots: %w", err)
		case p.Reached:
			fmt.Fprintf(w, "step 2/4: every old shard delivered up to the fence %s; the new shards deliver\n", rs.Fence)
			return nil
		case len(p.Missing) > 0:
			return fmt.Errorf("step 2/4: %s; then run reshard again", rs.MissingFix(p.Missing))
		}
		if !slices.Equal(p.Behind, last) {
			fmt.Fprintf(w, "step 2/4: waiting for old slots %v to confirm the fence %s (their relays must run)\n", p.Behind, rs.Fence)
			last = p.Behind
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("old slots %v have not reached the fence %s within --wait %s: start the relays of the old "+
				"shards, then run reshard again", p.Behind, rs.Fence, rc.wait)
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// dropOld is step 3: the old slots and publications, once no relay streams them.
func (rc reshardCmd) dropOld(ctx context.Context, conn *pgx.Conn, w io.Writer, rs relay.Reshard) error {
	deadline := time.Now().Add(rc.wait)
	for i, slot := range rs.OldSlots {
		p := relay.Pipeline{Name: fmt.Sprintf("%s (old shard %d of %d)", rs.Pipeline, i, rs.From), Slot: slot, Publication: rs.OldPubs[i]}
		for {
			slotDropped, pubDropped, err := dropPipeline(ctx, conn, rc.schema, p)
			if errors.Is(err, errSlotActive) && time.Now().Before(deadline) {
				if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("step 3/4: %w; the old relays retire once they see the fence: run reshard again", err)
			}
			fmt.Fprintf(w, "step 3/4: old slot %s %s, publication %s %s\n", slot, dropped(slotDropped), p.Publication, dropped(pubDropped))
			break
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// describeReshard says which step a reshard is at, for the command and for status; s is the
// schema of the relay's tables.
func describeReshard(ctx context.Context, q relay.ReshardDB, s string, rs relay.Reshard) string {
	head := fmt.Sprintf("reshard of pipeline %s from %d to %d shards", rs.Pipeline, rs.From, rs.To)
	switch {
	case rs.Finished != nil:
		return head + ": done " + rs.Finished.Format(time.RFC3339)
	case rs.Fence == "":
		return head + ": step 1/4, creating the new slots (no fence yet); the new shards wait"
	}
	p, err := relay.ReadFence(ctx, q, s, rs)
	switch {
	case err != nil:
		return head + ": " + err.Error()
	case len(p.Missing) > 0:
		return fmt.Sprintf("%s: step 2/4, fence %s; %s", head, rs.Fence, rs.MissingFix(p.Missing))
	case len(p.Behind) > 0:
		return fmt.Sprintf("%s: step 2/4, fence %s; old slots %v still delivering up to it; the new shards wait", head, rs.Fence, p.Behind)
	}
	return fmt.Sprintf("%s: step 3/4, fence %s reached; the new shards deliver; old slots %v to be dropped by "+
		"`outbox-relay reshard`", head, rs.Fence, rs.OldSlots)
}

// reshardWarnings describes every reshard under way in schema s, for status.
func reshardWarnings(ctx context.Context, conn *pgx.Conn, s string) []string {
	rows, err := conn.Query(ctx, schema.SQL(s, `SELECT pipeline FROM {outbox_reshard} WHERE finished_at IS NULL ORDER BY pipeline`))
	if err != nil {
		return nil // an older schema has no reshards
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range names {
		if rs, ok, err := relay.ReadReshard(ctx, conn, s, n); err == nil && ok {
			out = append(out, describeReshard(ctx, conn, s, rs))
		}
	}
	return out
}
