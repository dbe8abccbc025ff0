package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// Querier is what the catalog needs of a connection: pgx.Tx, *pgx.Conn and *pgxpool.Pool have
// it, and outbox.SQL adapts a database/sql transaction (outbox.Querier is the same interface).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Catalog names where the catalog lives. The zero value reads and writes outbox_event_types as
// the connection's search_path resolves it.
type Catalog struct {
	// Schema is the PostgreSQL schema of the relay's tables (as outbox.Schema). Empty: as the
	// connection's search_path resolves outbox_event_types.
	Schema string
}

// The statements name {outbox_event_types}, which schema.SQL qualifies. Each answers JSON
// (to_jsonb of rows, decoded by column name), so one decoder serves them and QueryRow is enough.
const (
	listTypesSQL = `SELECT coalesce(json_agg(t ORDER BY t.name), '[]'::json)::text FROM {outbox_event_types} t`
	getTypeSQL   = `SELECT to_jsonb(t)::text FROM {outbox_event_types} t WHERE name = $1`
	// putTypeSQL inserts a type or replaces one that differs, and answers the row (nothing when
	// the row was already so).
	putTypeSQL = `
INSERT INTO {outbox_event_types} AS t (name, description, schema, example, deprecated, replaced_by)
VALUES ($1, $2, $3::jsonb, $4::jsonb, $5, $6)
ON CONFLICT (name) DO UPDATE SET (description, schema, example, deprecated, replaced_by, updated_at) =
    (EXCLUDED.description, EXCLUDED.schema, EXCLUDED.example, EXCLUDED.deprecated, EXCLUDED.replaced_by, now())
WHERE (t.description, t.schema, t.example, t.deprecated, t.replaced_by) IS DISTINCT FROM
    (EXCLUDED.description, EXCLUDED.schema, EXCLUDED.example, EXCLUDED.deprecated, EXCLUDED.replaced_by)
RETURNING to_jsonb(t)::text, xmax = 0`
	deleteTypeSQL = `DELETE FROM {outbox_event_types} WHERE name = $1 RETURNING name`
	// existsSQL tells whether the table exists, so that a database migrated before it makes an
	// empty catalog instead of an error that would abort the caller's transaction.
	existsSQL = `SELECT to_regclass($1) IS NOT NULL`
)

// List returns every type, sorted by name.
func (c Catalog) List(ctx context.Context, q Querier) ([]Type, error) {
	var text string
	if err := q.QueryRow(ctx, c.sql(listTypesSQL)).Scan(&text); err != nil {
		return nil, c.dbError("list event types", err)
	}
	var out []Type
	if err := json.Unmarshal([]byte(text), &out); err != nil {
		return nil, fmt.Errorf("catalog: list event types: decode: %w", err)
	}
	for i := range out {
		out[i].normalize()
	}
	return out, nil
}

// Get returns the type of this name, or ErrNotFound.
func (c Catalog) Get(ctx context.Context, q Querier, name string) (Type, error) {
	t, err := scanType(q.QueryRow(ctx, c.sql(getTypeSQL), name))
	if isNoRows(err) {
		return Type{}, fmt.Errorf("catalog: event type %q: %w (`outbox-relay event-types list` lists them)", name, ErrNotFound)
	}
	if err != nil {
		return Type{}, c.dbError("read event type "+name, err)
	}
	return t, nil
}

// Put creates the type, or replaces the one of that name (its created_at stays), after Check
// and after checking that ReplacedBy names a type of the catalog. It reports whether the type
// is new. Bad input is refused with ErrInvalid and nothing is written.
func (c Catalog) Put(ctx context.Context, q Querier, t Type) (Type, bool, error) {
	t, err := Check(t)
	if err != nil {
		return Type{}, false, fmt.Errorf("catalog: %w", err)
	}
	if t.ReplacedBy != "" {
		if _, err := c.Get(ctx, q, t.ReplacedBy); errors.Is(err, ErrNotFound) {
			return Type{}, false, fmt.Errorf("catalog: %w %s: replaced_by %q is not in the catalog: add it first", ErrInvalid, t.Name, t.ReplacedBy)
		} else if err != nil {
			return Type{}, false, err
		}
	}
	return c.put(ctx, q, t)
}

// put writes a checked type.
func (c Catalog) put(ctx context.Context, q Querier, t Type) (Type, bool, error) {
	var (
		text    string
		created bool // xmax = 0: a row this statement inserted
	)
	err := q.QueryRow(ctx, c.sql(putTypeSQL), t.Name, t.Description, nullJSON(t.Schema), nullJSON(t.Example),
		t.Deprecated, nullString(t.ReplacedBy)).Scan(&text, &created)
	if isNoRows(err) { // the row was already so
		out, err := c.Get(ctx, q, t.Name)
		return out, false, err
	}
	if err != nil {
		return Type{}, false, c.dbError("put event type "+t.Name, err)
	}
	out, err := decodeType(text)
	return out, created, err
}

// Delete removes the type of this name, or answers ErrNotFound. Endpoints subscribed to it
// keep their patterns; a type that names it as ReplacedBy keeps the name.
func (c Catalog) Delete(ctx context.Context, q Querier, name string) error {
	var got string
	err := q.QueryRow(ctx, c.sql(deleteTypeSQL), name).Scan(&got)
	if isNoRows(err) {
		return fmt.Errorf("catalog: delete event type %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return c.dbError("delete event type "+name, err)
	}
	return nil
}

// CheckPatterns is CheckPatterns against the catalog in the database: nil when it is empty,
// or when the table does not exist yet (a database migrated before it), in which case nothing
// fails in the caller's transaction.
func (c Catalog) CheckPatterns(ctx context.Context, q Querier, patterns []string) (warnings []string, err error) {
	var exists bool
	if err := q.QueryRow(ctx, existsSQL, schema.Qualify(c.Schema, schema.EventTypes)).Scan(&exists); err != nil {
		return nil, c.dbError("read the event-type catalog", err)
	}
	if !exists {
		return nil, nil
	}
	types, err := c.List(ctx, q)
	if err != nil {
		return nil, err
	}
	return CheckPatterns(types, patterns)
}

func (c Catalog) sql(query string) string { return schema.SQL(c.Schema, query) }

// normalize makes a JSON null of the database nil, as Type documents.
func (t *Type) normalize() {
	if string(t.Schema) == "null" {
		t.Schema = nil
	}
	if string(t.Example) == "null" {
		t.Example = nil
	}
}

func scanType(row pgx.Row) (Type, error) {
	var text string
	if err := row.Scan(&text); err != nil {
		return Type{}, err
	}
	return decodeType(text)
}

func decodeType(text string) (Type, error) {
	var t Type
	if err := json.Unmarshal([]byte(text), &t); err != nil {
		return Type{}, fmt.Errorf("decode the row: %w", err)
	}
	t.normalize()
	return t, nil
}

func nullJSON(v json.RawMessage) *string {
	if v == nil {
		return nil
	}
	s := string(v)
	return &s
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func isNoRows(err error) bool {
	return errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows)
}

// dbError names the fix of a missing table and of a CHECK the row fails.
func (c Catalog) dbError(what string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.UndefinedTable:
			return fmt.Errorf("catalog: %s: table outbox_event_types does not exist in the relay's schema: run `outbox-relay migrate` "+
				"(it needs migration 16), or name the schema the relay's tables are in (--schema, Catalog.Schema): %w", what, err)
		case pgerrcode.CheckViolation:
			return fmt.Errorf("catalog: %s: %w: the table refuses it (constraint %s)", what, ErrInvalid, pgErr.ConstraintName)
		}
	}
	return fmt.Errorf("catalog: %s: %w", what, err)
}
