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

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/diagnose"
	"github.com/outbox-relay/outbox-relay/internal/retry"
)

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
	rs, ok, err := control.ReadReshard(ctx, r.pool, r.cfg.Schema, r.p.family())
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
		reached, err := control.OldShardRetired(ctx, r.pool, r.cfg.Schema, r.p.Slot, rs)
		if err != nil {
			return fenceState{}, err
		}
		return fenceState{retire: reached}, nil
	}
	return fenceState{}, nil
}

// newShardGate is a new shard's gate: shut until the fence is reached, which it records when it
// finds every old slot past it. An old slot missing before that keeps the gate shut and says
// how to recover what only that slot carried.
func (r *pipelineRunner) newShardGate(ctx context.Context, rs control.Reshard) (fenceState, error) {
	p, err := control.RecordFence(ctx, r.pool, r.cfg.Schema, rs)
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
	rs, ok, err := control.ReadReshard(ctx, conn, c.schema, fam)
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
func (c shardCheck) oldSlotGone(rs control.Reshard) error {
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
func checkShardCountsWithRetry(ctx context.Context, cfg Config, pipes []Pipeline, report func(error, time.Duration)) error {
	gate := newConfigGate(cfg)
	return retry.Do(ctx, startBackoff, func(ctx context.Context) error {
		err := checkShardCountsOnce(ctx, cfg, pipes)
		var pgErr *pgconn.PgError
		if _, conn := diagnose.Connect(err); !conn && errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege {
			return nil // Setup's privilege check names every GRANT missing, before it creates anything
		}
		if errors.Is(err, ErrPipeline) {
			return retry.Stop(err)
		}
		return gate.check(err)
	}, report)
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
