package publisher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// SinceRequest selects what `replay --since` re-sends: the rows of a time range (created_at)
// that were delivered, dead-lettered or parked, optionally of one aggregate type and event type.
type SinceRequest struct {
	Pipeline string
	Since    time.Time
	Until    time.Time // zero: up to the request
	// AggregateType and EventType, if not empty, keep only rows with that value.
	AggregateType string
	EventType     string
	// Schema is the PostgreSQL schema of the outbox tables. Empty: as the connection's
	// search_path resolves them.
	Schema string
}

// TypeCount is the number of rows of one aggregate type a replay re-sends.
type TypeCount struct {
	AggregateType string `json:"aggregate_type"`
	Events        int64  `json:"events"`
}

// SincePlan is what a `replay --since` re-sends, or would.
type SincePlan struct {
	// ID is the outbox_replays row of the request; 0 for a dry run or when nothing matches.
	ID       int64       `json:"id"`
	Pipeline string      `json:"pipeline"`
	Events   int64       `json:"events"`
	ByType   []TypeCount `json:"aggregate_types"`
	// First and Last are the created_at of the first and last matching rows.
	First *time.Time `json:"first"`
	Last  *time.Time `json:"last"`
	// Pending counts rows of the range not delivered yet (not marked done). Those committed before
	// the request go out first, as usual, and the replay, which waits for them, sends them again
	// in order with the rest; they count in the request's total.
	Pending int64 `json:"pending"`
	// OldestRow is the created_at of the oldest row left in outbox_events: rows before it were
	// pruned (prune, --retention) and cannot be re-sent. Nil for an empty table.
	OldestRow *time.Time `json:"oldest_row"`
}

// Pruned reports whether the range starts before the oldest row left: part of it may be gone.
func (p SincePlan) Pruned(since time.Time) bool {
	return p.OldestRow == nil || since.Before(*p.OldestRow)
}

// sinceFilter is the WHERE clause of a replay --since over $1..$4 (since, until, aggregate type,
// event type), for delivered, dead-lettered and parked rows. The time range is two plain
// comparisons (no OR), so that a page checks them in the index (outbox_events_replay_order).
const sinceFilter = `created_at >= $1 AND created_at < coalesce($2::timestamptz, 'infinity')
	AND ($3 = '' OR aggregate_type = $3) AND ($4 = '' OR event_type = $4)`

const sinceStatuses = ` AND status IN ('done', 'failed', 'parked')`

func (r SinceRequest) args() []any {
	var until *time.Time
	if !r.Until.IsZero() {
		until = &r.Until
	}
	return []any{r.Since, until, r.AggregateType, r.EventType}
}

// RequestReplaySince counts what req selects and, unless dryRun or nothing matches, records the
// request in outbox_replays and writes it into the WAL as a transactional logical decoding
// message. The relay leading req.Pipeline meets it at its place in the stream, after every event
// committed before it and before every event committed after it, and there re-sends the rows in
// their original commit order per aggregate, with their original ids and X-Event-Sequence, page
// by page.
func RequestReplaySince(ctx context.Context, conn *pgx.Conn, req SinceRequest, dryRun bool) (SincePlan, error) {
	plan := SincePlan{Pipeline: req.Pipeline, ByType: []TypeCount{}}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := countSince(ctx, tx, req, &plan); err != nil {
			return err
		}
		if dryRun || plan.Events+plan.Pending == 0 {
			return nil
		}
		return emitSince(ctx, tx, req, &plan)
	})
	return plan, err
}

func countSince(ctx context.Context, tx pgx.Tx, req SinceRequest, plan *SincePlan) error {
	rows, err := tx.Query(ctx, schema.SQL(req.Schema, `SELECT aggregate_type, count(*) FROM {outbox_events} WHERE `+sinceFilter+sinceStatuses+`
		GROUP BY aggregate_type ORDER BY aggregate_type`), req.args()...)
	if err != nil {
		return fmt.Errorf("count rows to replay: %w", err)
	}
	plan.ByType, err = pgx.CollectRows(rows, pgx.RowToStructByPos[TypeCount])
	if err != nil {
		return fmt.Errorf("count rows to replay: %w", err)
	}
	for _, c := range plan.ByType {
		plan.Events += c.Events
	}
	err = tx.QueryRow(ctx, schema.SQL(req.Schema, `SELECT min(created_at) FILTER (WHERE status <> 'pending'),
		max(created_at) FILTER (WHERE status <> 'pending'), count(*) FILTER (WHERE status = 'pending'),
		(SELECT min(created_at) FROM {outbox_events})
		FROM {outbox_events} WHERE `+sinceFilter), req.args()...).Scan(&plan.First, &plan.Last, &plan.Pending, &plan.OldestRow)
	if err != nil {
		return fmt.Errorf("read the range to replay: %w", err)
	}
	return nil
}

func emitSince(ctx context.Context, tx pgx.Tx, req SinceRequest, plan *SincePlan) error {
	a := req.args()
	err := tx.QueryRow(ctx, schema.SQL(req.Schema, `INSERT INTO {outbox_replays} (pipeline, since, until, aggregate_type, event_type, total, request_lsn)
		VALUES ($1, $2, $3, nullif($4, ''), nullif($5, ''), $6, pg_current_wal_insert_lsn()) RETURNING id`),
		req.Pipeline, a[0], a[1], a[2], a[3], plan.Events+plan.Pending).Scan(&plan.ID)
	if err != nil {
		return fmt.Errorf("record replay request: %w", err)
	}
	return cdc.ReplayRequest{SinceRequest: plan.ID, Pipeline: req.Pipeline}.Emit(ctx, tx)
}

// SinceCursor is a position in the order a replay --since re-sends rows: the original stream
// position (X-Event-Sequence; empty for rows delivered before the relay recorded it), then
// insertion order, then id. Per aggregate this is commit order.
type SinceCursor struct {
	Sequence string
	Insert   int64
	ID       string // empty: before the first row
}

// SinceState is a replay --since request as recorded in outbox_replays.
type SinceState struct {
	SinceRequest
	ID    int64
	Total int64
	Sent  int64
	After SinceCursor
	Done  bool
}

// SinceStore reads and records replay --since requests; PGStore implements it. A Publisher
// whose Store does not ignores such requests.
type SinceStore interface {
	// SinceState reads request id.
	SinceState(ctx context.Context, id int64) (SinceState, error)
	// SincePage returns up to limit rows after st.After, in order, to be re-sent within tx (the
	// request's transaction), and the position of the last. Each keeps its recorded Sequence,
	// or, if none was recorded, takes one at tx's commit LSN that rises with insertion order.
	SincePage(ctx context.Context, st SinceState, limit int, tx *cdc.Tx) ([]*envelope.Message, SinceCursor, error)
	// SinceProgress records that every row up to st.After was delivered (Sent of them), and
	// whether the request is complete.
	SinceProgress(ctx context.Context, st SinceState) error
}

var errNoSinceRequest = errors.New("no such replay request")
