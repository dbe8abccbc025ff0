package control

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/controlmsg"
	"github.com/outbox-relay/outbox-relay/internal/state"
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
	// EventID, if not empty, keeps only that event (the API's resend of one event to one
	// endpoint: Since and Until then bracket its created_at).
	EventID string
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

// replayRange is r as internal/state selects it.
func (r SinceRequest) replayRange() state.ReplayRange {
	return state.ReplayRange{Since: r.Since, Until: r.Until, AggregateType: r.AggregateType, EventType: r.EventType, EventID: r.EventID}
}

// RequestReplaySince counts what req selects and, unless dryRun or nothing matches, records the
// request in outbox_replays and writes it into the WAL as a transactional logical decoding
// message. The relay leading req.Pipeline meets it at its place in the stream, after every event
// committed before it and before every event committed after it, and there re-sends the rows in
// their original commit order per aggregate, with their original ids and X-Event-Sequence, page
// by page. conn is a *pgx.Conn, or a pgx.Tx to record the request in a transaction of the
// caller's (a savepoint of it).
func RequestReplaySince(ctx context.Context, conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, req SinceRequest, dryRun bool) (SincePlan, error) {
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
	c, err := state.CountReplay(ctx, tx, req.Schema, req.replayRange())
	if err != nil {
		return err
	}
	plan.ByType = make([]TypeCount, len(c.ByType))
	for i, t := range c.ByType {
		plan.ByType[i] = TypeCount{AggregateType: t.AggregateType, Events: t.Events}
		plan.Events += t.Events
	}
	plan.First, plan.Last, plan.Pending, plan.OldestRow = c.First, c.Last, c.Pending, c.OldestRow
	return nil
}

func emitSince(ctx context.Context, tx pgx.Tx, req SinceRequest, plan *SincePlan) error {
	id, err := state.RecordReplay(ctx, tx, req.Schema, req.Pipeline, req.replayRange(), plan.Events+plan.Pending)
	if err != nil {
		return err
	}
	plan.ID = id
	return controlmsg.Replay{SinceRequest: plan.ID, Pipeline: req.Pipeline}.Emit(ctx, tx)
}
