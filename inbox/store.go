package inbox

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

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
