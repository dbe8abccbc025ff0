// Package schemacheck checks that a database holds the relay's schema as this binary needs it,
// and names the fix when it does not: the check `outbox-relay run` makes before it creates
// anything (cdc.Setup) and the one `outbox-relay status` reports. It reads the catalog and the
// version table only, so a check leaves nothing behind.
//
// What belongs here: recognising a schema by what it holds (tables, columns, indexes of
// schema.Tables, the version history of migrations) and the messages that say what to run.
// The names themselves are internal/schema's; the SQL that creates them is migrations'.
package schemacheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// ErrNoSchema is wrapped by the error Check returns when a table or column the relay needs is
// missing, or the schema is older than this binary.
var ErrNoSchema = errors.New("outbox schema is missing or out of date")

// ErrForeignTable is wrapped by the error Check returns when outbox_events exists but was
// not created by `outbox-relay migrate`.
var ErrForeignTable = errors.New("table outbox_events is not the relay's table")

// Check checks that the relay's schema holds what this binary uses: every table, column
// and index of schema.Tables (the inbox's table aside). name is the schema named by the
// operator (--schema); empty means the connection's current_schema(). A schema is recognised by
// what it holds, not by who installed it: one installed from the migration files by another
// tool (Flyway, Atlas, psql -f) passes when it is complete. It only reads the catalog and the
// version table, so it leaves nothing behind. Its errors wrap ErrNoSchema or ErrForeignTable
// and name the fix.
// It returns the schema it checked.
func Check(ctx context.Context, db schema.Querier, name string) (string, error) {
	s, err := schema.Resolve(ctx, db, name)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoSchema, err)
	}
	if err := MissingOutboxTable(ctx, db, name, s); err != nil {
		return s, err
	}
	f, err := schema.Read(ctx, db, s)
	if err != nil {
		return s, err
	}
	h, err := migrations.ReadHistory(ctx, db, s)
	if err != nil {
		return s, err
	}
	if f.Foreign() && h.Table == "" {
		return s, withElsewhere(ctx, db, s, foreignTableError(f, name))
	}
	if missing := f.Missing(migrations.Latest(), false); len(missing) > 0 {
		err := missingError(f, name, missing, h)
		if h.Table == "" {
			err = withElsewhere(ctx, db, s, err)
		}
		return s, err
	}
	return s, nil
}

// withElsewhere adds to err where the relay's version table is, if another schema has it: the
// relay's tables are there, and s has only some table of the same name.
func withElsewhere(ctx context.Context, db schema.Querier, s string, err error) error {
	others, lookupErr := schema.Elsewhere(ctx, db, s, schema.VersionTable)
	if lookupErr != nil || len(others) == 0 {
		return err
	}
	return fmt.Errorf("%w; schema %s has the relay's tables (and %s): if they are the ones meant, pass --schema %s "+
		"(env OUTBOX_RELAY_SCHEMA, `schema:` in the pipelines file)", err, strings.Join(others, ", "), schema.VersionTable, others[0])
}

// MissingOutboxTable returns nil when schema s (resolved from name, the operator's --schema)
// has outbox_events, else an error wrapping ErrNoSchema that says where to migrate, and where a
// table of that name exists instead.
func MissingOutboxTable(ctx context.Context, db schema.Querier, name, s string) error {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema.Qualify(s, schema.Events)).Scan(&exists); err != nil {
		return fmt.Errorf("look up outbox_events: %w", err)
	}
	if exists {
		return nil
	}
	where := fmt.Sprintf("schema %s", schema.Quote(s))
	if name == "" {
		where += " (the connection's current_schema(), first on its search_path)"
	}
	msg := fmt.Sprintf("in %s of this database: run `%s`", where, schema.MigrateCommand(name, s))
	others, err := schema.Elsewhere(ctx, db, s, schema.Events)
	if err != nil {
		return err
	}
	if len(others) > 0 {
		msg += fmt.Sprintf("; a table outbox_events exists in schema %s: if it is the relay's, pass --schema %s "+
			"(env OUTBOX_RELAY_SCHEMA, `schema:` in the pipelines file)", strings.Join(others, ", "), others[0])
	}
	return fmt.Errorf("%w: %w %s", ErrNoSchema, schema.ErrNoTable, msg)
}

func foreignTableError(f schema.Found, name string) error {
	var missing []string
	for _, c := range schema.CoreColumns() {
		if !slices.Contains(f.Columns(schema.Events), c) {
			missing = append(missing, c)
		}
	}
	table := schema.Qualify(f.Schema, schema.Events)
	return fmt.Errorf("%w: %s lacks column(s) %s (it has %s), so it was not created by `outbox-relay migrate`; "+
		"rename it (ALTER TABLE %s RENAME TO outbox_events_old) or give the relay another database or schema "+
		"(--schema NAME), then run `%s`", ErrForeignTable, table, strings.Join(missing, ", "),
		strings.Join(f.Columns(schema.Events), ", "), table, schema.MigrateCommand(name, f.Schema))
}

// missingError says what the schema lacks and, from its history, what to do about it.
func missingError(f schema.Found, name string, missing []schema.Piece, h migrations.History) error {
	s, list := f.Schema, pieceList(missing)
	migrate := schema.MigrateCommand(name, s)
	switch {
	case h.Table == schema.VersionTable && h.Readable && h.Version < migrations.Latest():
		return fmt.Errorf("%w: the schema is at version %d and this binary needs version %d (it lacks %s): run `%s`",
			ErrNoSchema, h.Version, migrations.Latest(), list, migrate)
	case h.Table == schema.VersionTable && h.Readable:
		return fmt.Errorf("%w: %s missing although %s records version %d: the schema was altered by hand; "+
			"restore them as the migrations create them (migrations/*.sql; `outbox-relay migrate` does not apply a version twice)",
			ErrNoSchema, list, schema.VersionTable, h.Version)
	case h.Table == schema.VersionTable:
		return fmt.Errorf("%w: schema %s lacks %s: run `%s`", ErrNoSchema, schema.Quote(s), list, migrate)
	case h.Table == schema.LegacyVersionTable:
		return fmt.Errorf("%w: the schema is at version %d (recorded in goose_db_version by an earlier release) and this "+
			"binary needs version %d (it lacks %s): run `%s`; it moves the relay's versions to %s and applies the rest",
			ErrNoSchema, h.Version, migrations.Latest(), list, migrate, schema.VersionTable)
	}
	fix := "apply the Up sections of those files with that tool"
	if v, exact := f.Shape(migrations.Latest()); v > 0 && exact {
		// migrate records versions 1 to v as applied and applies the rest.
		fix += fmt.Sprintf(", or run `%s` (it records versions 1 to %d, which are there, and applies the rest)", migrate, v)
	}
	return fmt.Errorf("%w: schema %s lacks %s, and has no version history of the relay (installed from the migration "+
		"files by another tool?): %s", ErrNoSchema, schema.Quote(s), list, fix)
}

// pieceList lists pieces for a message, each with the migration file that adds it.
func pieceList(pieces []schema.Piece) string {
	s := make([]string, len(pieces))
	for i, p := range pieces {
		s[i] = p.String() + " (" + migrations.Source(p.Since) + ")"
	}
	return strings.Join(s, ", ")
}
