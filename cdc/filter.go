package cdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// RowFilterVersion is the first server_version_num whose publications take row filters.
const RowFilterVersion = 150000

// ErrFilter means PostgreSQL refused a pipeline's row filter (an unknown column, a mutable or
// user-defined function, a syntax error): the error carries its reason.
var ErrFilter = errors.New("row filter refused")

// FilterError is a row filter PostgreSQL refused, with the pipeline it belongs to.
type FilterError struct {
	Pipeline string
	Filter   string
	Err      error
}

func (e *FilterError) Error() string {
	return fmt.Sprintf("pipeline %q: %v %q: %v; fix the pipeline's filter (a boolean over outbox_events columns, "+
		"immutable built-in functions only)", e.Pipeline, ErrFilter, e.Filter, e.Err)
}

func (e *FilterError) Unwrap() []error { return []error{ErrFilter, e.Err} }

// ValidateFilters asks PostgreSQL to accept each pipeline's row filter (by name) inside a
// transaction that is rolled back, so a refused filter leaves nothing behind; it returns each
// filter in PostgreSQL's canonical form (pg_get_expr), which is what a publication stores and
// what Setup compares. Empty filters are skipped. A missing outbox_events table is left to
// Setup's own check, which names the fix.
func ValidateFilters(ctx context.Context, dsn, s string, filters map[string]string) (map[string]string, error) {
	canon := map[string]string{}
	hasFilter := false
	for _, f := range filters {
		hasFilter = hasFilter || f != ""
	}
	if !hasFilter {
		return canon, nil
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	if err := checkRowFilterVersion(ctx, conn); err != nil {
		return nil, err
	}
	if s, err = schema.Resolve(ctx, conn, s); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.Background())
	for name, f := range filters {
		if f == "" {
			continue
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT f"); err != nil {
			return nil, err
		}
		c, err := canonicalFilter(ctx, tx, s, f)
		if sqlstate(err) == pgerrcode.UndefinedTable {
			return canon, nil // Setup's checkOutboxTable says what to do
		}
		if err != nil && sqlstate(err) != "" {
			return nil, &FilterError{Pipeline: name, Filter: f, Err: err}
		}
		if err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT f"); err != nil {
			return nil, err
		}
		canon[name] = c
	}
	return canon, nil
}

// canonicalFilter creates a scratch publication of s's outbox_events with filter f inside tx
// and reads the filter back as PostgreSQL stores it. The caller rolls back.
func canonicalFilter(ctx context.Context, tx pgx.Tx, s, f string) (string, error) {
	const scratch = "outbox_relay_filter_check"
	if _, err := tx.Exec(ctx, "CREATE PUBLICATION "+scratch+" FOR TABLE "+schema.Qualify(s, OutboxTable)+
		" WHERE ("+f+") WITH (publish = 'insert')"); err != nil {
		return "", err
	}
	c, err := publicationFilter(ctx, tx, scratch, s)
	return c, err
}

// querier is what publicationFilter needs from a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// publicationFilter returns the row filter of s's outbox_events in publication pub, canonical,
// or "" when it has none. The server must be 15 or later.
func publicationFilter(ctx context.Context, q querier, pub, s string) (string, error) {
	var f string
	err := q.QueryRow(ctx, `
		SELECT coalesce(pg_get_expr(pr.prqual, pr.prrelid), '')
		FROM pg_publication p JOIN pg_publication_rel pr ON pr.prpubid = p.oid
		WHERE p.pubname = $1 AND pr.prrelid = $2::regclass`, pub, schema.Qualify(s, OutboxTable)).Scan(&f)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the filter of publication %q: %w", pub, err)
	}
	return f, nil
}

func serverVersion(ctx context.Context, q querier) (int, error) {
	var num int
	err := q.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num)
	return num, err
}

func checkRowFilterVersion(ctx context.Context, q querier) error {
	num, err := serverVersion(ctx, q)
	if err != nil {
		return fmt.Errorf("read server_version_num: %w", err)
	}
	if num < RowFilterVersion {
		return fmt.Errorf("%w: row filters need PostgreSQL 15 or later (this server is %d); remove the pipelines' filters",
			ErrFilter, num)
	}
	return nil
}

// applyFilter makes publication pub's row filter be filter (empty: none), and reports the old
// and new canonical filters when it changed. A new filter applies to rows committed after it.
func applyFilter(ctx context.Context, conn *pgx.Conn, pub, s, filter string) (changed bool, old, now string, err error) {
	num, err := serverVersion(ctx, conn)
	if err != nil {
		return false, "", "", fmt.Errorf("read server_version_num: %w", err)
	}
	if num < RowFilterVersion {
		if filter != "" {
			return false, "", "", checkRowFilterVersion(ctx, conn)
		}
		return false, "", "", nil
	}
	if old, err = publicationFilter(ctx, conn, pub, s); err != nil {
		return false, "", "", err
	}
	want := ""
	if filter != "" {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return false, "", "", err
		}
		want, err = canonicalFilter(ctx, tx, s, filter)
		_ = tx.Rollback(context.Background())
		if err != nil {
			return false, "", "", &FilterError{Pipeline: pub, Filter: filter, Err: err}
		}
	}
	if old == want {
		return false, old, want, nil
	}
	stmt := "ALTER PUBLICATION " + pgx.Identifier{pub}.Sanitize() + " SET TABLE " + schema.Qualify(s, OutboxTable)
	if filter != "" {
		stmt += " WHERE (" + filter + ")"
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		if sqlstate(err) == pgerrcode.InsufficientPrivilege {
			return false, old, want, fmt.Errorf("%w to change the filter: run `%s` as the owner of outbox_events", ErrNoPrivilege, stmt)
		}
		return false, old, want, fmt.Errorf("change the filter of publication %q: %w", pub, err)
	}
	return true, old, want, nil
}
