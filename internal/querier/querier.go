// Package querier is the one-method querier the producer's packages (outbox, endpoints) take
// from a caller's transaction, and its adapter for database/sql, shared so that each public
// package's SQL function is one line.
package querier

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
)

// SQLTx is what database/sql's *sql.Tx, *sql.DB and *sql.Conn have in common.
type SQLTx interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// SQL adapts a database/sql transaction to a QueryRow querier.
type SQL struct{ Tx SQLTx }

// QueryRow runs query through the database/sql transaction.
func (q SQL) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return q.Tx.QueryRowContext(ctx, query, args...)
}

// IsNoRows reports whether err means a query returned no row, from pgx or database/sql.
func IsNoRows(err error) bool {
	return errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows)
}
