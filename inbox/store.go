package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// queries are the inbox's statements for one table name. Every argument is a uuid.UUID, a
// string, a number, a time or nil, and the casts are in the SQL, so any database/sql driver
// runs them as pgx does.
type queries struct {
	table string // as written in the SQL: "inbox_events", or "app"."inbox_events"
	// insertEvent claims the event id. A concurrent delivery of the same id waits here on the
	// first one's uncommitted row: if that commits, this inserts nothing (a duplicate); if it
	// rolls back, this inserts and proceeds.
	insertEvent string
	// markDone records success; clock_timestamp, not now(), so processed_at is when the
	// ProcessFunc finished rather than when the transaction began (received_at).
	markDone string
	// insertBatch claims the ids of a batch in one statement, in id order, so that two
	// batches sharing events lock them in the same order (a deadlock between them is still
	// possible only through the ProcessFunc's own writes; PostgreSQL breaks it, and the loser
	// answers 503 and is retried). It returns the ids that were new. The batch travels as one
	// JSON array of {id, payload}, the payloads embedded as they are.
	insertBatch   string
	markBatchDone string
	pruneCutoff   string
	pruneBatch    string
}

// tableName is inbox_events in schema s, quoted, or unqualified (search_path decides) when s
// is empty.
func tableName(s string) string { return schema.Qualify(s, schema.Inbox) }

func newQueries(s string) queries {
	t := tableName(s)
	return queries{
		table: t,
		insertEvent: `INSERT INTO ` + t + ` (id, handler_status, payload, signature)
		VALUES ($1, 'received', $2::text::jsonb, $3) ON CONFLICT (id) DO NOTHING`,
		markDone: `UPDATE ` + t + ` SET handler_status = 'done', processed_at = clock_timestamp() WHERE id = $1`,
		insertBatch: `INSERT INTO ` + t + ` (id, handler_status, payload, signature)
		SELECT b.id, 'received', b.payload, $2
		FROM jsonb_to_recordset($1::text::jsonb) AS b(id uuid, payload jsonb) ORDER BY b.id
		ON CONFLICT (id) DO NOTHING RETURNING id`,
		markBatchDone: `UPDATE ` + t + ` SET handler_status = 'done', processed_at = clock_timestamp()
		WHERE id = ANY(string_to_array($1::text, ',')::uuid[])`,
		pruneCutoff: pruneCutoffSQL,
		pruneBatch:  fmt.Sprintf(pruneBatchSQL, t),
	}
}

// missingTable says which table is missing, and where it was looked for.
func missingTable(s string) string {
	if s == "" {
		return "table inbox_events does not exist in any schema of search_path (no Schema set)"
	}
	return fmt.Sprintf("table %s does not exist (Schema %q)", tableName(s), s)
}

// nullable turns an empty signature (a broker message has none) into NULL.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// deliver runs the event's one transaction: claim the id, apply the event, mark it done,
// commit. It reports a duplicate when the id was already committed. On any error the
// transaction is rolled back, so no row and no effect remain.
func (p *Processor) deliver(ctx context.Context, ev Event, sig string) (duplicate bool, err error) {
	tx, err := p.store.begin(ctx)
	if err != nil {
		return false, fmt.Errorf("%w: begin: %w", errDatabase, err)
	}
	// A no-op after Commit. If it fails (say ctx is done), the driver closes the connection,
	// which ends the transaction on the server just the same.
	defer func() { _ = tx.rollback(ctx) }()
	n, err := tx.exec(ctx, p.q.insertEvent, ev.ID, string(ev.Payload), nullable(sig))
	if err != nil {
		return false, p.classifyInsert(err)
	}
	if n == 0 {
		return true, commit(ctx, tx)
	}
	if err := apply(ctx, tx, ev); err != nil {
		return false, err
	}
	if _, err := tx.exec(ctx, p.q.markDone, ev.ID); err != nil {
		return false, markError(err)
	}
	return false, commit(ctx, tx)
}

func commit(ctx context.Context, tx txn) error {
	if err := tx.commit(ctx); err != nil {
		return fmt.Errorf("%w: commit: %w", errDatabase, err)
	}
	return nil
}

// markError tells a ProcessFunc that broke the transaction (ended it, or returned nil after a
// statement failed in it, which database/sql does not report before the next statement) from a
// database failure.
func markError(err error) error {
	switch {
	case isTxClosed(err):
		return fmt.Errorf("%w: it ended the transaction itself", errHandler)
	case sqlState(err) == pgerrcode.InFailedSQLTransaction:
		return fmt.Errorf("%w: it returned nil after a statement failed in its transaction", errHandler)
	}
	return fmt.Errorf("%w: mark done: %w", errDatabase, err)
}

// sqlState is the SQLSTATE of a PostgreSQL error from any driver (pgconn.PgError and lib/pq's
// Error both tell it), or "".
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

// classifyInsert tells a payload PostgreSQL refuses (a data exception such as "\u0000" in a
// jsonb string, or a program limit such as nesting too deep) from a database failure: the
// first would fail on every retry, so it is ErrMalformed. A missing table is a database
// failure too (503, the relay retries), with the fix in the log.
func (p *Processor) classifyInsert(err error) error {
	code := sqlState(err)
	switch {
	case pgerrcode.IsDataException(code) || pgerrcode.IsProgramLimitExceeded(code):
		return fmt.Errorf("%w: payload refused by PostgreSQL: %w", ErrMalformed, err)
	case code == pgerrcode.UndefinedTable:
		return fmt.Errorf("%w: %s: create it with inboxmigrate.Migrate or `outbox-relay migrate --inbox-only`: %w",
			errDatabase, missingTable(p.schema), err)
	}
	return fmt.Errorf("%w: insert into %s: %w", errDatabase, p.q.table, err)
}

// apply calls the ProcessFunc, turning a panic into an error, and checks it left the
// transaction usable.
func apply(ctx context.Context, tx txn, ev Event) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &panicError{value: v, stack: debug.Stack()}
		}
	}()
	if err := tx.process(ctx, ev); err != nil {
		return fmt.Errorf("%w: %w", errHandler, err)
	}
	if tx.aborted() {
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

// batchRecord is one element of insertBatch's JSON.
type batchRecord struct {
	ID      uuid.UUID       `json:"id"`
	Payload json.RawMessage `json:"payload"`
}

// deliverBatch runs a batch's one transaction: claim every id, apply each new event in batch
// order, mark them done, commit. Events already recorded (and repeats of an id within the
// batch) are skipped. It returns which events were applied, parallel to evs. On any error
// everything is rolled back: no row and no effect of any event of the batch remain.
func (p *Processor) deliverBatch(ctx context.Context, evs []Event, sig string) (applied []bool, err error) {
	records := make([]batchRecord, 0, len(evs))
	seen := make(map[uuid.UUID]bool, len(evs))
	for _, ev := range evs {
		if !seen[ev.ID] {
			seen[ev.ID] = true
			records = append(records, batchRecord{ID: ev.ID, Payload: ev.Payload})
		}
	}
	doc, err := json.Marshal(records)
	if err != nil { // the payloads were checked to be JSON; this cannot fail but costs nothing to say
		return nil, fmt.Errorf("%w: encode the batch: %w", ErrMalformed, err)
	}
	tx, err := p.store.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: begin: %w", errDatabase, err)
	}
	defer func() { _ = tx.rollback(ctx) }()
	fresh, err := tx.queryIDs(ctx, p.q.insertBatch, string(doc), nullable(sig))
	if err != nil {
		return nil, p.classifyInsert(err)
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
		if err := apply(ctx, tx, ev); err != nil {
			return nil, fmt.Errorf("event %s (batch element %d): %w", ev.ID, i, err)
		}
		applied[i] = true
	}
	if len(fresh) > 0 {
		if _, err := tx.exec(ctx, p.q.markBatchDone, idList(fresh)); err != nil {
			return nil, markError(err)
		}
	}
	return applied, commit(ctx, tx)
}

// idList is ids as one comma-separated string, for string_to_array.
func idList(ids []uuid.UUID) string {
	var b strings.Builder
	b.Grow(len(ids) * 37)
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(id.String())
	}
	return b.String()
}
