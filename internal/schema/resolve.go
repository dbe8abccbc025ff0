package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrNoTable is wrapped when the schema of the relay's tables has no outbox_events.
var ErrNoTable = errors.New("table outbox_events does not exist")

// ErrNoSchema is wrapped when the schema named for the relay's tables does not exist, or when
// none is named and the connection has no current_schema().
var ErrNoSchema = errors.New("no schema for the relay's tables")

// Resolve returns the schema of the relay's tables: name, which must exist, or, when name is
// empty, the connection's current_schema(). Its errors wrap ErrNoSchema and name the fix.
func Resolve(ctx context.Context, q Querier, name string) (string, error) {
	if name == "" {
		var cur *string
		var path string
		if err := q.QueryRow(ctx, `SELECT current_schema(), current_setting('search_path')`).Scan(&cur, &path); err != nil {
			return "", fmt.Errorf("read current_schema(): %w", err)
		}
		if cur == nil {
			return "", fmt.Errorf("%w: the connection's search_path (%s) names no schema that exists, so there is no "+
				"current_schema(): name the schema of the relay's tables (--schema, env OUTBOX_RELAY_SCHEMA; Schema in Go), "+
				"or fix the role's search_path", ErrNoSchema, path)
		}
		return *cur, nil
	}
	exists, err := Exists(ctx, q, name)
	if err != nil {
		return "", err
	}
	if !exists {
		return "", fmt.Errorf("%w: schema %s does not exist in this database: run `%s` "+
			"(it creates the schema and the tables), or correct the schema's name (--schema, env OUTBOX_RELAY_SCHEMA; Schema in Go)",
			ErrNoSchema, Quote(name),
			MigrateCommand(name, name))
	}
	return name, nil
}

// Create creates schema name unless it exists, for a migrate that was told where to install.
// It looks first: CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when the
// schema exists, which an application's role often lacks.
func Create(ctx context.Context, conn *pgx.Conn, name string) error {
	if exists, err := Exists(ctx, conn, name); err != nil || exists {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+Quote(name)); err != nil {
		return fmt.Errorf("create schema %s: %w (create it as a role that may, or give the migrating role "+
			"CREATE on the database: GRANT CREATE ON DATABASE ... TO ...)", Quote(name), err)
	}
	return nil
}

// Exists reports whether schema name exists.
func Exists(ctx context.Context, q Querier, name string) (bool, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, name).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up schema %s: %w", name, err)
	}
	return exists, nil
}

// Elsewhere lists the schemas other than s that have a table named table, in name order: where
// to look when s lacks it.
func Elsewhere(ctx context.Context, q Querier, s, table string) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relname = $1 AND c.relkind IN ('r', 'p') AND n.nspname <> $2 AND n.nspname NOT LIKE 'pg\_temp\_%'
		ORDER BY 1`, table, s)
	if err != nil {
		return nil, fmt.Errorf("look up %s in other schemas: %w", table, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up %s in other schemas: %w", table, err)
	}
	return out, nil
}

// MigrateCommand is the command line that migrates schema s, for a message: with the --schema
// flag when the operator named the schema (name), without it when s is the default.
func MigrateCommand(name, s string) string {
	if name == "" {
		return "outbox-relay migrate"
	}
	return "outbox-relay migrate --schema " + shellWord(s)
}

// shellWord quotes s for a POSIX shell when it has anything but letters, digits and _ . -.
func shellWord(s string) string {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}
