package inspect

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// qualified runs queries whose table names are schema.SQL placeholders ({outbox_events}) in one
// schema: the internal readers of this package take it as their DB, so each query names the
// tables of the schema being inspected.
type qualified struct {
	db     DB
	schema string
}

func inSchema(db DB, s string) DB { return qualified{db: db, schema: s} }

func (q qualified) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return q.db.Query(ctx, schema.SQL(q.schema, sql), args...)
}

func (q qualified) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return q.db.QueryRow(ctx, schema.SQL(q.schema, sql), args...)
}
