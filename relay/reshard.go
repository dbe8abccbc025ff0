package relay

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// Reshard is a pipeline's row in outbox_reshard, written by `outbox-relay reshard`: the change
// of its shard count from From to To, fenced at Fence (docs/guides/shards.md, Changing N).
//
// The guarantee: the new shards' slots all start at or before Fence (the command advances them
// to it), and a new shard delivers nothing until every old slot has confirmed Fence, that is,
// until every event committed at or before Fence was delivered by an old shard. An aggregate's
// events up to the fence therefore all arrive before any of its later events; what an old shard
// still sends after the fence (until it retires) is a duplicate of what the new shard sends, in
// the same order. A restart of any relay at any point changes none of this: the fence and the
// slots' positions are in the database.
type Reshard struct {
	Pipeline          string
	From, To          int
	OldSlots, OldPubs []string
	NewSlots          []string
	Fence             string // pg_lsn text; empty until the new slots exist
	Started           time.Time
	// Reached is when the fence was found reached (every old slot had confirmed it) and
	// recorded: from then on the new shards deliver, and an old slot missing is one the command
	// retired. Nil: not yet, and an old slot missing was dropped by hand before the fence.
	Reached  *time.Time
	Finished *time.Time
}

// ReshardQuerier is what ReadReshard needs: a connection, a pool or a transaction.
type ReshardQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReshardDB is what ReadFence and RecordFence need: a connection or a pool.
type ReshardDB interface {
	ReshardQuerier
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ReadReshard returns pipeline's reshard row from outbox_reshard of schema s (empty: as the
// search_path resolves it); ok is false when it has none (or the schema has no outbox_reshard
// table yet).
func ReadReshard(ctx context.Context, q ReshardQuerier, s, pipeline string) (r Reshard, ok bool, err error) {
	var fence *string
	err = q.QueryRow(ctx, schema.SQL(s, `SELECT pipeline, from_shards, to_shards, old_slots, old_pubs, new_slots, fence::text,
		started_at, fence_reached_at, finished_at FROM {outbox_reshard} WHERE pipeline = $1`), pipeline).
		Scan(&r.Pipeline, &r.From, &r.To, &r.OldSlots, &r.OldPubs, &r.NewSlots, &fence, &r.Started, &r.Reached, &r.Finished)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable:
		return r, false, nil
	case err != nil:
		return r, false, fmt.Errorf("read the reshard of pipeline %q: %w", pipeline, err)
	}
	if fence != nil {
		r.Fence = *fence
	}
	return r, true, nil
}

// FenceProgress is where a reshard's old slots stand against its fence.
type FenceProgress struct {
	// Reached: the fence is reached (recorded, or every old slot confirmed it just now).
	Reached bool
	// Behind are the old slots that have not confirmed the fence yet, or still deliver the
	// backfill of a slot recreated after it was lost.
	Behind []string
	// Missing are the old slots dropped before the fence was reached: by hand (`reshard` drops
	// an old slot only after). What their shards committed before the fence and had not
	// delivered is in no slot: MissingFix says how to recover it.
	Missing []string
}

// oldSlotBehind is true for an old slot (o.slot, joined to pg_replication_slots as s) that is
// missing or behind the fence, or still delivers a backfill. It names outbox_backfill by its
// placeholder: the query that uses it goes through schema.SQL.
func oldSlotBehind(fence string) string {
	return `(s.slot_name IS NULL OR s.confirmed_flush_lsn IS NULL OR s.confirmed_flush_lsn < ` + fence + `
		OR EXISTS (SELECT 1 FROM {outbox_backfill} b WHERE b.slot = o.slot))`
}

// oldSlotsQuery lists the old slots ($1) with where they stand: missing, or behind the fence ($2).
var oldSlotsQuery = `SELECT o.slot, s.slot_name IS NULL, ` + oldSlotBehind("$2::pg_lsn") + `
	FROM unnest($1::text[]) AS o(slot) LEFT JOIN pg_replication_slots s ON s.slot_name = o.slot ORDER BY o.slot`

// ReadFence reports where r's old slots stand, changing nothing (see RecordFence); s is the
// schema of the relay's tables (empty: as the search_path resolves it).
func ReadFence(ctx context.Context, q ReshardDB, s string, r Reshard) (FenceProgress, error) {
	if r.Reached != nil || r.Finished != nil {
		return FenceProgress{Reached: true}, nil
	}
	var p FenceProgress
	if r.Fence == "" {
		return FenceProgress{Behind: r.OldSlots}, nil
	}
	var slot string
	var missing, behind bool
	rows, err := q.Query(ctx, schema.SQL(s, oldSlotsQuery), r.OldSlots, r.Fence)
	if err != nil {
		return p, fmt.Errorf("read the old slots: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&slot, &missing, &behind}, func() error {
		switch {
		case missing:
			p.Missing = append(p.Missing, slot)
		case behind:
			p.Behind = append(p.Behind, slot)
		}
		return nil
	}); err != nil {
		return p, fmt.Errorf("read the old slots: %w", err)
	}
	p.Reached = len(p.Missing) == 0 && len(p.Behind) == 0
	return p, nil
}

// RecordFence records r's fence as reached when every old slot exists and has confirmed it (and
// delivered any backfill), in one statement, so that the record is true when written; then the
// new shards may deliver, and an old slot missing later was retired, not lost. It returns the
// progress, read again when the fence is not reached. s is the schema of the relay's tables
// (empty: as the search_path resolves it).
func RecordFence(ctx context.Context, db ReshardDB, s string, r Reshard) (FenceProgress, error) {
	if r.Reached != nil || r.Finished != nil || r.Fence == "" {
		return ReadFence(ctx, db, s, r)
	}
	tag, err := db.Exec(ctx, schema.SQL(s, `UPDATE {outbox_reshard} r SET fence_reached_at = now()
		WHERE pipeline = $1 AND fence IS NOT NULL AND fence_reached_at IS NULL AND NOT EXISTS (
			SELECT 1 FROM unnest(r.old_slots) AS o(slot) LEFT JOIN pg_replication_slots s ON s.slot_name = o.slot
			WHERE `+oldSlotBehind("r.fence")+`)`), r.Pipeline)
	if err != nil {
		return FenceProgress{}, fmt.Errorf("record the reshard's fence as reached: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return FenceProgress{Reached: true}, nil
	}
	if now, ok, err := ReadReshard(ctx, db, s, r.Pipeline); err != nil || !ok {
		return FenceProgress{}, err
	} else if now.Reached != nil { // recorded by another process meanwhile
		return FenceProgress{Reached: true}, nil
	}
	return ReadFence(ctx, db, s, r)
}

// MissingFix is what to do about old slots dropped before the fence (FenceProgress.Missing).
func (r Reshard) MissingFix(missing []string) string {
	return fmt.Sprintf("old slot(s) %v of pipeline %s were dropped before they confirmed the reshard's fence %s: what "+
		"their shards committed before the fence and had not delivered is in no slot. The new shards wait, so nothing is lost "+
		"yet: start the relay of each such old shard (shards: %d) once with --recreate-slot; it creates the slot again and "+
		"backfills that shard's pending rows (rows delivered but not yet marked done are sent again), and the new shards "+
		"deliver once those are delivered", missing, r.Pipeline, r.Fence, r.From)
}

// shardCount is the number of shards p is one of: 1 for a pipeline that is not sharded.
func (p *Pipeline) shardCount() int { return max(p.shard.of, 1) }

// slotBase is the slot name the family's shard slots are derived from.
func (p *Pipeline) slotBase() string {
	if p.shard.of > 0 {
		return p.shard.slotBase
	}
	return p.Slot
}

// fenceState is what the reshard row means for this pipeline now.
type fenceState struct {
	gated  bool   // a new shard waiting for the fence: deliver nothing
	lost   bool   // with gated: an old slot was dropped before the fence (why says the fix)
	why    string // the reason, for the pause and the log
	retire bool   // an old shard whose slot confirmed the fence: stop streaming
}

// fence reads the family's reshard row and decides what it means for r.
func (r *pipelineRunner) fence(ctx context.Context) (fenceState, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rs, ok, err := ReadReshard(ctx, r.pool, r.cfg.Schema, r.p.family())
	if err != nil || !ok || rs.Finished != nil {
		return fenceState{}, err
	}
	n := r.p.shardCount()
	switch {
	case n == rs.To && rs.Fence == "":
		return fenceState{gated: true, why: fmt.Sprintf("reshard to %d shards: waiting for the fence", rs.To)}, nil
	case n == rs.To:
		return r.newShardGate(ctx, rs)
	case n == rs.From && rs.Fence != "":
		// An old shard retires once its slot confirmed the fence and delivered any backfill (a
		// slot recreated after it was dropped before the fence starts past it).
		var reached bool
		err := r.pool.QueryRow(ctx, schema.SQL(r.cfg.Schema, `SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false)
			AND NOT EXISTS (SELECT 1 FROM {outbox_backfill} WHERE slot = $1) FROM pg_replication_slots
			WHERE slot_name = $1`), r.p.Slot, rs.Fence).Scan(&reached)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fenceState{}, err
		}
		return fenceState{retire: reached}, nil
	}
	return fenceState{}, nil
}

// newShardGate is a new shard's gate: shut until the fence is reached, which it records when it
// finds every old slot past it. An old slot missing before that keeps the gate shut and says
// how to recover what only that slot carried.
func (r *pipelineRunner) newShardGate(ctx context.Context, rs Reshard) (fenceState, error) {
	p, err := RecordFence(ctx, r.pool, r.cfg.Schema, rs)
	switch {
	case err != nil:
		return fenceState{}, err
	case p.Reached:
		return fenceState{}, nil
	case len(p.Missing) > 0:
		return fenceState{gated: true, lost: true, why: fmt.Sprintf("reshard to %d shards: waiting: %s", rs.To, rs.MissingFix(p.Missing))}, nil
	}
	return fenceState{gated: true, why: fmt.Sprintf("reshard to %d shards: waiting until the old shards "+
		"deliver everything up to the fence %s (behind: %v)", rs.To, rs.Fence, p.Behind)}, nil
}

var shardSlot = regexp.MustCompile(`_s([0-9]+)of([0-9]+)$`)

// checkShardCounts refuses to run a pipeline with a shard count that its slots or its reshard
// row contradict: changing shards: by hand while the old shards' slots exist would let an old and
// a new shard deliver one aggregate at once, out of order. `outbox-relay reshard` is the way.
func checkShardCounts(ctx context.Context, conn *pgx.Conn, pipes []Pipeline, cfg Config) error {
	slots := map[string]bool{}
	rows, err := conn.Query(ctx, `SELECT slot_name FROM pg_replication_slots WHERE database = current_database()`)
	if err != nil {
		return fmt.Errorf("list slots: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list slots: %w", err)
	}
	for _, s := range names {
		slots[s] = true
	}
	for _, p := range pipes {
		c := shardCheck{p: p, slots: slots, schema: cfg.Schema, flags: len(cfg.Pipelines) == 0, recreate: cfg.RecreateSlot}
		if err := c.check(ctx, conn); err != nil {
			return err
		}
	}
	return nil
}

// shardCheck is checkShardCounts' view of one pipeline.
type shardCheck struct {
	p        Pipeline
	slots    map[string]bool // the database's slots
	schema   string          // of the relay's tables (Config.Schema, resolved)
	flags    bool            // the pipeline comes from flags (--shards), not a file (shards:)
	recreate bool            // --recreate-slot
}

// count is how the operator sets n shards: shards: N in the file, or --shards N.
func (c shardCheck) count(n int) string {
	if c.flags {
		return fmt.Sprintf("--shards %d", n)
	}
	return fmt.Sprintf("shards: %d", n)
}

func (c shardCheck) check(ctx context.Context, conn *pgx.Conn) error {
	n, fam := c.p.shardCount(), c.p.family()
	rs, ok, err := ReadReshard(ctx, conn, c.schema, fam)
	switch {
	case err != nil:
		return err
	case ok && rs.Finished == nil && n != rs.From && n != rs.To:
		return fmt.Errorf("%w %q: a reshard from %d to %d shards is under way; set %s (or %s until it is done)",
			ErrPipeline, fam, rs.From, rs.To, c.count(rs.To), c.count(rs.From))
	case ok && rs.Finished != nil && n != rs.To:
		return fmt.Errorf("%w %q: it was resharded to %d shards; set %s, or run `outbox-relay reshard --pipeline %s --to %d`",
			ErrPipeline, fam, rs.To, c.count(rs.To), fam, n)
	case ok && n == rs.From && rs.Finished == nil && rs.Fence != "" && !c.slots[c.p.Slot]:
		return c.oldSlotGone(rs)
	case ok:
		return nil
	}
	return c.checkSlots(fam, n)
}

// oldSlotGone refuses an old shard whose slot is gone during a reshard: creating it again would
// leave a stray slot pinning WAL (after the fence, when `reshard` retired it), or silently skip
// what only the dropped slot carried (before the fence, unless --recreate-slot backfills it).
func (c shardCheck) oldSlotGone(rs Reshard) error {
	if rs.Reached != nil {
		return fmt.Errorf("%w %q: it is being resharded to %d shards and this old shard's slot %s was retired by "+
			"`outbox-relay reshard` once it had delivered everything up to the fence: set %s (the new shards carry everything since)",
			ErrPipeline, rs.Pipeline, rs.To, c.p.Slot, c.count(rs.To))
	}
	if c.recreate {
		return nil // Setup creates the slot again with a backfill of the shard's pending rows
	}
	return fmt.Errorf("%w %q: %s", ErrPipeline, rs.Pipeline, rs.MissingFix([]string{c.p.Slot}))
}

// checkSlots refuses a count that the family's existing slots contradict (no reshard recorded).
func (c shardCheck) checkSlots(fam string, n int) error {
	base := c.p.slotBase()
	for s := range c.slots {
		other := 0
		if s == base {
			other = 1
		} else if m := shardSlot.FindStringSubmatch(s); m != nil && s[:len(s)-len(m[0])] == base {
			other, _ = strconv.Atoi(m[2])
		}
		if other != 0 && other != n {
			return fmt.Errorf("%w %q: slot %s belongs to %d shard(s) of it, this config says %d; change the count with "+
				"`outbox-relay reshard --pipeline %s --to %d` (editing the count alone could reorder events)",
				ErrPipeline, fam, s, other, n, fam, n)
		}
	}
	return nil
}

// checkShardCountsWithRetry runs checkShardCountsOnce, waiting for a database that is not
// reachable yet; a refused count is permanent.
func checkShardCountsWithRetry(ctx context.Context, cfg Config, pipes []Pipeline) error {
	wait := 200 * time.Millisecond
	for {
		err := checkShardCountsOnce(ctx, cfg, pipes)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege {
			return nil // Setup's privilege check names every GRANT missing, before it creates anything
		}
		if err == nil || errors.Is(err, ErrPipeline) || permanent(err) {
			return err
		}
		cfg.Logger.Warn().Err(err).Dur("retry_in", wait).Msg("database not ready; retrying")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 10*time.Second)
	}
}

// checkShardCountsOnce connects and runs checkShardCounts.
func checkShardCountsOnce(ctx context.Context, cfg Config, pipes []Pipeline) error {
	conn, err := pgx.Connect(ctx, cfg.DSN)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	return checkShardCounts(ctx, conn, pipes, cfg)
}
