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
// of its shard count from From to To, fenced at Fence (README: Shards, Changing N).
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
	Finished          *time.Time
}

// ReshardQuerier is what ReadReshard needs: a connection, a pool or a transaction.
type ReshardQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReadReshard returns pipeline's reshard row from outbox_reshard of schema s (empty: as the
// search_path resolves it); ok is false when it has none (or the schema has no outbox_reshard
// table yet).
func ReadReshard(ctx context.Context, q ReshardQuerier, s, pipeline string) (r Reshard, ok bool, err error) {
	var fence *string
	err = q.QueryRow(ctx, schema.SQL(s, `SELECT pipeline, from_shards, to_shards, old_slots, old_pubs, new_slots, fence::text,
		started_at, finished_at FROM {outbox_reshard} WHERE pipeline = $1`), pipeline).
		Scan(&r.Pipeline, &r.From, &r.To, &r.OldSlots, &r.OldPubs, &r.NewSlots, &fence, &r.Started, &r.Finished)
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

// OldBehind returns the old slots that have not yet confirmed the fence (a dropped one has: the
// command drops only slots that did).
func OldBehind(ctx context.Context, q ReshardQuerier, r Reshard) ([]string, error) {
	var behind []string
	err := q.QueryRow(ctx, `SELECT coalesce(array_agg(slot_name ORDER BY slot_name), '{}') FROM pg_replication_slots
		WHERE slot_name = ANY($1) AND (confirmed_flush_lsn IS NULL OR confirmed_flush_lsn < $2::pg_lsn)`,
		r.OldSlots, r.Fence).Scan(&behind)
	return behind, err
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
		behind, err := OldBehind(ctx, r.pool, rs)
		if err != nil {
			return fenceState{}, err
		}
		if len(behind) > 0 {
			return fenceState{gated: true, why: fmt.Sprintf("reshard to %d shards: waiting until the old shards "+
				"deliver everything up to the fence %s (behind: %v)", rs.To, rs.Fence, behind)}, nil
		}
	case n == rs.From && rs.Fence != "":
		var reached bool
		err := r.pool.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false) FROM pg_replication_slots
			WHERE slot_name = $1`, r.p.Slot, rs.Fence).Scan(&reached)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fenceState{}, err
		}
		return fenceState{retire: reached}, nil
	}
	return fenceState{}, nil
}

var shardSlot = regexp.MustCompile(`_s([0-9]+)of([0-9]+)$`)

// checkShardCounts refuses to run a pipeline with a shard count that its slots or its reshard
// row contradict: changing shards: by hand while the old shards' slots exist would let an old and
// a new shard deliver one aggregate at once, out of order. `outbox-relay reshard` is the way.
func checkShardCounts(ctx context.Context, conn *pgx.Conn, s string, pipes []Pipeline) error {
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
		if err := checkShardCount(ctx, conn, s, p, slots); err != nil {
			return err
		}
	}
	return nil
}

func checkShardCount(ctx context.Context, conn *pgx.Conn, s string, p Pipeline, slots map[string]bool) error {
	n, fam := p.shardCount(), p.family()
	rs, ok, err := ReadReshard(ctx, conn, s, fam)
	if err != nil {
		return err
	}
	if ok && rs.Finished == nil && n != rs.From && n != rs.To {
		return fmt.Errorf("%w %q: a reshard from %d to %d shards is under way; set shards: %d (or %d until it is done)",
			ErrPipeline, fam, rs.From, rs.To, rs.To, rs.From)
	}
	if ok && rs.Finished != nil && n != rs.To {
		return fmt.Errorf("%w %q: it was resharded to %d shards; set shards: %d, or run `outbox-relay reshard --pipeline %s --to %d`",
			ErrPipeline, fam, rs.To, rs.To, fam, n)
	}
	if ok {
		return nil
	}
	base := p.slotBase()
	for s := range slots {
		other := 0
		if s == base {
			other = 1
		} else if m := shardSlot.FindStringSubmatch(s); m != nil && s[:len(s)-len(m[0])] == base {
			other, _ = strconv.Atoi(m[2])
		}
		if other != 0 && other != n {
			return fmt.Errorf("%w %q: slot %s belongs to %d shard(s) of it, this config says %d; change the count with "+
				"`outbox-relay reshard --pipeline %s --to %d` (editing shards: alone could reorder events)",
				ErrPipeline, fam, s, other, n, fam, n)
		}
	}
	return nil
}

// checkShardCountsOnce connects and runs checkShardCounts (the database is reachable: the
// filters were just validated on it).
func checkShardCountsOnce(ctx context.Context, cfg Config, pipes []Pipeline) error {
	conn, err := pgx.Connect(ctx, cfg.DSN)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	return checkShardCounts(ctx, conn, cfg.Schema, pipes)
}
