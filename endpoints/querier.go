package endpoints

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/querier"
)

// Querier is what the Store's methods need from a transaction, as outbox.Enqueue does: pgx.Tx,
// *pgx.Conn and *pgxpool.Pool satisfy it (and so does outbox.Querier); wrap a *sql.Tx with SQL.
// A change made through a querier that can begin a transaction (pgx's) locks the row from its
// read to its write in a savepoint of its own.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SQL adapts a database/sql transaction (or *sql.DB, *sql.Conn) to Querier.
func SQL(tx interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) Querier {
	return querier.SQL{Tx: tx}
}

func isNoRows(err error) bool { return querier.IsNoRows(err) }
