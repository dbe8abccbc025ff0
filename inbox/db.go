package inbox

import (
	"context"
	"database/sql"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is a pgx database the inbox runs its transactions on: a *pgxpool.Pool (the usual one),
// or a *pgx.Conn used by one goroutine at a time. For database/sql, see SQLDB.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// SQLDB is a database/sql database the inbox runs its transactions on: a *sql.DB of any
// PostgreSQL driver (lib/pq, pgx's stdlib), or a *sql.Conn used by one goroutine at a time.
type SQLDB interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// ProcessFunc applies one verified, first-seen event. It runs inside the transaction that
// records the event in inbox_events: write the event's effects through tx and they commit
// together with the record, exactly once. Returning an error (or panicking) rolls both back and
// answers 500, so the relay retries. It must not commit or roll back tx, and should not take a
// second connection from the same pool, which could wait forever on a full pool.
type ProcessFunc func(ctx context.Context, tx pgx.Tx, ev Event) error

// SQLProcessFunc is ProcessFunc for database/sql (NewSQL, NewSQLProcessor): the same contract,
// with the inbox's transaction as a *sql.Tx.
type SQLProcessFunc func(ctx context.Context, tx *sql.Tx, ev Event) error

// store begins the inbox's transactions in one driver's terms; txn is one of them. The inbox's
// own statements use nothing driver-specific (no array or json Go types), so that every
// database/sql driver runs them.
type store interface {
	begin(ctx context.Context) (txn, error)
}

type txn interface {
	exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
	queryRow(ctx context.Context, query string, args ...any) row
	queryIDs(ctx context.Context, query string, args ...any) ([]uuid.UUID, error)
	// process runs the ProcessFunc with the driver's own transaction.
	process(ctx context.Context, ev Event) error
	// aborted reports a transaction a failed statement left unusable, when the driver tells.
	aborted() bool
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
}

type row interface{ Scan(dest ...any) error }

// errNoProcessFunc is what a txn of Prune or Migrate answers to process: they have none.
var errNoProcessFunc = errors.New("inbox: no ProcessFunc")

// pgxStore is a store over a DB.
type pgxStore struct {
	db DB
	fn ProcessFunc
}

func (s pgxStore) begin(ctx context.Context) (txn, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgxTxn{tx: tx, fn: s.fn}, nil
}

type pgxTxn struct {
	tx pgx.Tx
	fn ProcessFunc
}

func (t pgxTxn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (t pgxTxn) queryRow(ctx context.Context, query string, args ...any) row {
	return t.tx.QueryRow(ctx, query, args...)
}

func (t pgxTxn) queryIDs(ctx context.Context, query string, args ...any) ([]uuid.UUID, error) {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

func (t pgxTxn) process(ctx context.Context, ev Event) error {
	if t.fn == nil {
		return errNoProcessFunc
	}
	return t.fn(ctx, t.tx, ev)
}

func (t pgxTxn) aborted() bool {
	c := t.tx.Conn()
	return c != nil && c.PgConn().TxStatus() == 'E'
}

func (t pgxTxn) commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgxTxn) rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

// sqlStore is a store over an SQLDB.
type sqlStore struct {
	db SQLDB
	fn SQLProcessFunc
}

func (s sqlStore) begin(ctx context.Context) (txn, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return sqlTxn{tx: tx, fn: s.fn}, nil
}

type sqlTxn struct {
	tx *sql.Tx
	fn SQLProcessFunc
}

func (t sqlTxn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqlTxn) queryRow(ctx context.Context, query string, args ...any) row {
	return t.tx.QueryRowContext(ctx, query, args...)
}

func (t sqlTxn) queryIDs(ctx context.Context, query string, args ...any) ([]uuid.UUID, error) {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []uuid.UUID
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func (t sqlTxn) process(ctx context.Context, ev Event) error {
	if t.fn == nil {
		return errNoProcessFunc
	}
	return t.fn(ctx, t.tx, ev)
}

// aborted is false: database/sql does not tell. The next statement (marking the event done)
// fails with SQLSTATE 25P02 instead, which deliver reports the same way.
func (t sqlTxn) aborted() bool { return false }

func (t sqlTxn) commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTxn) rollback(context.Context) error { return t.tx.Rollback() }

// isTxClosed reports a statement refused because the transaction had already ended: the
// ProcessFunc committed or rolled it back itself.
func isTxClosed(err error) bool {
	return errors.Is(err, pgx.ErrTxClosed) || errors.Is(err, sql.ErrTxDone)
}

// singleConn reports a store over one connection, which two goroutines must not share.
func singleConn(s store) bool {
	switch s := s.(type) {
	case pgxStore:
		_, ok := s.db.(*pgx.Conn)
		return ok
	case sqlStore:
		_, ok := s.db.(*sql.Conn)
		return ok
	}
	return false
}

// nilDB reports a nil database, also one typed as *pgxpool.Pool, *pgx.Conn, *sql.DB or
// *sql.Conn inside the interface.
func nilDB(db any) bool {
	switch d := db.(type) {
	case nil:
		return true
	case *pgxpool.Pool:
		return d == nil
	case *pgx.Conn:
		return d == nil
	case *sql.DB:
		return d == nil
	case *sql.Conn:
		return d == nil
	}
	return false
}
