package inbox

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// insertEvent claims the event id. A concurrent delivery of the same id waits here on the
	// first one's uncommitted row: if that commits, this inserts nothing (a duplicate); if it
	// rolls back, this inserts and proceeds.
	insertEvent = `INSERT INTO inbox_events (id, handler_status, payload, signature)
		VALUES ($1, 'received', $2, $3) ON CONFLICT (id) DO NOTHING`
	// markDone records success; clock_timestamp, not now(), so processed_at is when the
	// ProcessFunc finished rather than when the transaction began (received_at).
	markDone = `UPDATE inbox_events SET handler_status = 'done', processed_at = clock_timestamp() WHERE id = $1`
)

// deliver runs the event's one transaction: claim the id, apply the event, mark it done,
// commit. It reports a duplicate when the id was already committed. On any error the
// transaction is rolled back, so no row and no effect remain.
func (h *Handler) deliver(ctx context.Context, ev Event, sig string) (duplicate bool, err error) {
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("%w: begin: %w", errDatabase, err)
	}
	// A no-op after Commit. If it fails (say ctx is done), pgx closes the connection, which
	// ends the transaction on the server just the same.
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, insertEvent, ev.ID, ev.Payload, sig)
	if err != nil {
		return false, classifyInsert(err)
	}
	if tag.RowsAffected() == 0 {
		return true, commit(ctx, tx)
	}
	if err := h.apply(ctx, tx, ev); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, markDone, ev.ID); err != nil {
		if errors.Is(err, pgx.ErrTxClosed) {
			return false, fmt.Errorf("%w: it ended the transaction itself", errHandler)
		}
		return false, fmt.Errorf("%w: mark done: %w", errDatabase, err)
	}
	return false, commit(ctx, tx)
}

func commit(ctx context.Context, tx pgx.Tx) error {
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("%w: commit: %w", errDatabase, err)
	}
	return nil
}

// classifyInsert tells a payload PostgreSQL refuses (a data exception such as "\u0000" in a
// jsonb string, or a program limit such as nesting too deep) from a database failure: the
// first would fail on every retry, so it is ErrMalformed.
func classifyInsert(err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pgerrcode.IsDataException(pg.Code) || pgerrcode.IsProgramLimitExceeded(pg.Code)) {
		return fmt.Errorf("%w: payload refused by PostgreSQL: %w", ErrMalformed, err)
	}
	return fmt.Errorf("%w: insert into inbox_events: %w", errDatabase, err)
}

// apply calls the ProcessFunc, turning a panic into an error, and checks it left the
// transaction usable.
func (h *Handler) apply(ctx context.Context, tx pgx.Tx, ev Event) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	if err := h.process(ctx, tx, ev); err != nil {
		return fmt.Errorf("%w: %w", errHandler, err)
	}
	if tx.Conn().PgConn().TxStatus() == 'E' {
		return fmt.Errorf("%w: it returned nil after a statement failed in its transaction", errHandler)
	}
	return nil
}

// panicError is a ProcessFunc's recovered panic.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("%v: panic: %v", errHandler, p.value) }
func (p *panicError) Unwrap() error { return errHandler }

const (
	// insertBatch claims the ids of a batch in one statement, in id order, so that two
	// batches sharing events lock them in the same order (a deadlock between them is still
	// possible only through the ProcessFunc's own writes; PostgreSQL breaks it, and the loser
	// answers 503 and is retried). It returns the ids that were new.
	insertBatch = `INSERT INTO inbox_events (id, handler_status, payload, signature)
		SELECT t.id, 'received', t.payload::jsonb, $3
		FROM unnest($1::uuid[], $2::text[]) AS t(id, payload) ORDER BY t.id
		ON CONFLICT (id) DO NOTHING RETURNING id`
	markBatchDone = `UPDATE inbox_events SET handler_status = 'done', processed_at = clock_timestamp() WHERE id = ANY($1)`
)

// deliverBatch runs a batch's one transaction: claim every id, apply each new event in batch
// order, mark them done, commit. Events already recorded (and repeats of an id within the
// batch) are skipped. It returns which events were applied, parallel to evs. On any error
// everything is rolled back: no row and no effect of any event of the batch remain.
func (h *Handler) deliverBatch(ctx context.Context, evs []Event, sig string) (applied []bool, err error) {
	ids := make([]uuid.UUID, 0, len(evs))
	payloads := make([]string, 0, len(evs))
	seen := make(map[uuid.UUID]bool, len(evs))
	for _, ev := range evs {
		if seen[ev.ID] {
			continue
		}
		seen[ev.ID] = true
		ids = append(ids, ev.ID)
		payloads = append(payloads, string(ev.Payload))
	}
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: begin: %w", errDatabase, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rows, err := tx.Query(ctx, insertBatch, ids, payloads, sig)
	if err != nil {
		return nil, classifyInsert(err)
	}
	fresh, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, classifyInsert(err)
	}
	isNew := make(map[uuid.UUID]bool, len(fresh))
	for _, id := range fresh {
		isNew[id] = true
	}
	applied = make([]bool, len(evs))
	for i, ev := range evs {
		if !isNew[ev.ID] {
			continue
		}
		delete(isNew, ev.ID) // a repeat later in the batch is skipped
		if err := h.apply(ctx, tx, ev); err != nil {
			return nil, fmt.Errorf("event %s (batch element %d): %w", ev.ID, i, err)
		}
		applied[i] = true
	}
	if len(fresh) > 0 {
		if _, err := tx.Exec(ctx, markBatchDone, fresh); err != nil {
			if errors.Is(err, pgx.ErrTxClosed) {
				return nil, fmt.Errorf("%w: it ended the transaction itself", errHandler)
			}
			return nil, fmt.Errorf("%w: mark done: %w", errDatabase, err)
		}
	}
	return applied, commit(ctx, tx)
}
