package control

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

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// Shard is one shard of the pipeline being resharded, as the relay names it: the pipeline's
// name for it (orders_s1of4), its slot and publication, and the pipeline's row filter.
type Shard struct {
	Name, Slot, Publication, Filter string
}

// Resharder changes a pipeline's shard count, in the steps `outbox-relay reshard` runs (README:
// Shards, Changing N); each step is recorded in outbox_reshard, so a run after an interruption
// continues where the last one stopped. Every field is required unless it says otherwise.
type Resharder struct {
	DSN    string // the database, for creating the new shards' publications and slots (cdc.Setup)
	Schema string // of the relay's tables, resolved (schema.Resolve)
	// Pipeline is the pipeline's name, and Slot the slot name its shards' slots derive from
	// (orders: outbox_relay_orders, then outbox_relay_orders_s0of4 ...).
	Pipeline, Slot string
	To             int // the new shard count
	// Shards returns the n shards of the pipeline, as the relay names them (relay.Pipeline's
	// ShardPipelines).
	Shards func(n int) []Shard
	DryRun bool          // print the plan and the current step; change nothing
	Wait   time.Duration // how long steps 2 and 3 wait for the old shards before giving up; re-run to wait more
	Out    io.Writer     // where each step is reported
}

var shardSuffix = regexp.MustCompile(`_s[0-9]+of([0-9]+)$`)

// currentShards returns the shard count the family's existing slots say (0: no slot).
func (rc Resharder) currentShards(ctx context.Context, conn *pgx.Conn) (int, error) {
	rows, err := conn.Query(ctx, `SELECT slot_name FROM pg_replication_slots WHERE database = current_database()`)
	if err != nil {
		return 0, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	base := rc.Slot
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
				"with drop-pipeline", rc.Pipeline, found, n)
		}
		if n != 0 {
			found = n
		}
	}
	return found, nil
}

func names(ps []Shard, f func(Shard) string) []string {
	var out []string
	for _, p := range ps {
		out = append(out, f(p))
	}
	return out
}

// start returns the reshard row, inserting it when there is none under way.
func (rc Resharder) start(ctx context.Context, conn *pgx.Conn, w io.Writer) (Reshard, bool, error) {
	rs, ok, err := ReadReshard(ctx, conn, rc.Schema, rc.Pipeline)
	if err != nil {
		return rs, false, err
	}
	if ok && rs.Finished == nil {
		if rs.To != rc.To {
			return rs, false, fmt.Errorf("a reshard of %q from %d to %d shards is under way: finish it (--to %d) first",
				rc.Pipeline, rs.From, rs.To, rs.To)
		}
		return rs, true, nil
	}
	from, err := rc.currentShards(ctx, conn)
	if err != nil {
		return rs, false, err
	}
	switch {
	case from == 0:
		return rs, false, fmt.Errorf("pipeline %q has no slot yet: set shards: %d in the file and start the relays", rc.Pipeline, rc.To)
	case from == rc.To:
		fmt.Fprintf(w, "pipeline %s already has %d shards; nothing to do\n", rc.Pipeline, rc.To)
		return rs, false, nil
	}
	old, now := rc.Shards(from), rc.Shards(rc.To)
	rs = Reshard{Pipeline: rc.Pipeline, From: from, To: rc.To,
		OldSlots: names(old, func(p Shard) string { return p.Slot }),
		OldPubs:  names(old, func(p Shard) string { return p.Publication }),
		NewSlots: names(now, func(p Shard) string { return p.Slot })}
	fmt.Fprintf(w, "pipeline %s: reshard %d -> %d; old slots %v, new slots %v\n", rc.Pipeline, from, rc.To, rs.OldSlots, rs.NewSlots)
	if rc.DryRun {
		return rs, false, nil
	}
	_, err = conn.Exec(ctx, schema.SQL(rc.Schema, `INSERT INTO {outbox_reshard} (pipeline, from_shards, to_shards, old_slots, old_pubs, new_slots)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (pipeline) DO UPDATE SET from_shards = $2, to_shards = $3, old_slots = $4, old_pubs = $5,
			new_slots = $6, fence = NULL, started_at = now(), fence_reached_at = NULL, finished_at = NULL
		WHERE outbox_reshard.finished_at IS NOT NULL`), rs.Pipeline, rs.From, rs.To, rs.OldSlots, rs.OldPubs, rs.NewSlots)
	if err != nil {
		return rs, false, fmt.Errorf("record the reshard: %w", err)
	}
	rs, ok, err = ReadReshard(ctx, conn, rc.Schema, rc.Pipeline)
	return rs, ok && rs.Finished == nil, err
}

// Run runs the reshard on conn, from the step the table records: it returns once the reshard is
// done, or with the error of the step that cannot go on (which says what to do), or when a
// step waited Wait in vain.
func (rc Resharder) Run(ctx context.Context, conn *pgx.Conn) error {
	w := rc.Out
	rs, going, err := rc.start(ctx, conn, w)
	if err != nil || !going {
		return err
	}
	fmt.Fprintf(w, "%s\n", DescribeReshard(ctx, conn, rc.Schema, rs))
	if rc.DryRun {
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
	if _, err := conn.Exec(ctx, schema.SQL(rc.Schema, `UPDATE {outbox_reshard} SET finished_at = now() WHERE pipeline = $1`), rs.Pipeline); err != nil {
		return fmt.Errorf("mark the reshard done: %w", err)
	}
	fmt.Fprintf(w, "step 4/4: pipeline %s has %d shards; set shards: %d in every relay's file\n", rs.Pipeline, rs.To, rs.To)
	return nil
}

// fence is step 1: the new publications and slots, the fence, the slots advanced to it.
func (rc Resharder) fence(ctx context.Context, conn *pgx.Conn, w io.Writer, rs Reshard) (Reshard, error) {
	for _, p := range rc.Shards(rs.To) {
		if _, err := cdc.Setup(ctx, rc.DSN, p.Slot, p.Publication, cdc.SetupOptions{Schema: rc.Schema, NoBackfill: true, Filter: p.Filter}); err != nil {
			return rs, fmt.Errorf("create shard %s: %w", p.Name, err)
		}
	}
	if rs.Fence == "" {
		if _, err := conn.Exec(ctx, schema.SQL(rc.Schema, `UPDATE {outbox_reshard} SET fence = (SELECT max(confirmed_flush_lsn) FROM pg_replication_slots
			WHERE slot_name = ANY($2)) WHERE pipeline = $1 AND fence IS NULL`), rs.Pipeline, rs.NewSlots); err != nil {
			return rs, fmt.Errorf("record the fence: %w", err)
		}
		var err error
		if rs, _, err = ReadReshard(ctx, conn, rc.Schema, rs.Pipeline); err != nil {
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
func (rc Resharder) waitOld(ctx context.Context, conn *pgx.Conn, w io.Writer, rs Reshard) error {
	deadline := time.Now().Add(rc.Wait)
	var last []string
	for {
		p, err := RecordFence(ctx, conn, rc.Schema, rs)
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
				"shards, then run reshard again", p.Behind, rs.Fence, rc.Wait)
		}
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// dropOld is step 3: the old slots and publications, once no relay streams them.
func (rc Resharder) dropOld(ctx context.Context, conn *pgx.Conn, w io.Writer, rs Reshard) error {
	deadline := time.Now().Add(rc.Wait)
	for i, slot := range rs.OldSlots {
		p := Shard{Name: fmt.Sprintf("%s (old shard %d of %d)", rs.Pipeline, i, rs.From), Slot: slot, Publication: rs.OldPubs[i]}
		for {
			slotDropped, pubDropped, err := DropPipeline(ctx, conn, rc.Schema, p.Name, p.Slot, p.Publication)
			if errors.Is(err, ErrSlotActive) && time.Now().Before(deadline) {
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

// DescribeReshard says which step a reshard is at, for the command and for status; s is the
// schema of the relay's tables.
func DescribeReshard(ctx context.Context, q ReshardDB, s string, rs Reshard) string {
	head := fmt.Sprintf("reshard of pipeline %s from %d to %d shards", rs.Pipeline, rs.From, rs.To)
	switch {
	case rs.Finished != nil:
		return head + ": done " + rs.Finished.Format(time.RFC3339)
	case rs.Fence == "":
		return head + ": step 1/4, creating the new slots (no fence yet); the new shards wait"
	}
	p, err := ReadFence(ctx, q, s, rs)
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

// ReshardWarnings describes every reshard under way in schema s, for status.
func ReshardWarnings(ctx context.Context, conn *pgx.Conn, s string) []string {
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
		if rs, ok, err := ReadReshard(ctx, conn, s, n); err == nil && ok {
			out = append(out, DescribeReshard(ctx, conn, s, rs))
		}
	}
	return out
}
