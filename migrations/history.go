package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// ErrConflict is wrapped by UpWith's error when the schema already holds something the
// migrations cannot build on: another application's outbox_events, an incomplete set of the
// relay's tables without history, or a goose_db_version whose rows cannot be told apart from an
// application's. UpWith then changes nothing, and the message names the fix.
var ErrConflict = errors.New("the schema already holds tables the relay's migrations cannot build on")

// History is where and how far the relay's versions are recorded in one schema.
type History struct {
	// Table is schema.VersionTable; schema.LegacyVersionTable when only goose_db_version holds
	// the relay's versions (a database migrated by an earlier release, not upgraded yet); or ""
	// when neither does (never migrated, or installed by another tool).
	Table string
	// Version is the highest version recorded, 0 when Table is "" or cannot be read.
	Version int64
	// Readable is false when the role may not read Table.
	Readable bool
}

// Querier runs one query; *pgx.Conn, *pgxpool.Pool and pgx.Tx satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReadHistory returns the relay's version history in schema s. It only reads, so a check
// leaves no trace.
func ReadHistory(ctx context.Context, q Querier, s string) (History, error) {
	for _, t := range []string{schema.VersionTable, schema.LegacyVersionTable} {
		var exists, readable bool
		err := q.QueryRow(ctx, `SELECT r IS NOT NULL, coalesce(has_table_privilege(r, 'SELECT'), false)
			FROM to_regclass($1) AS r`, schema.Qualify(s, t)).Scan(&exists, &readable)
		if err != nil {
			return History{}, fmt.Errorf("look up %s: %w", schema.Qualify(s, t), err)
		}
		if !exists {
			continue
		}
		h := History{Table: t, Readable: readable}
		if !readable {
			return h, nil
		}
		// Queried apart: a statement naming a missing table fails as it is parsed.
		query := `SELECT coalesce(max(version_id), 0) FROM ` + schema.Qualify(s, t)
		if t == schema.LegacyVersionTable {
			query += fmt.Sprintf(" WHERE version_id BETWEEN 1 AND %d AND is_applied", schema.LegacyLatest)
		}
		if err := q.QueryRow(ctx, query).Scan(&h.Version); err != nil {
			return History{}, fmt.Errorf("read the schema version from %s: %w", schema.Qualify(s, t), err)
		}
		if t == schema.LegacyVersionTable && h.Version == 0 {
			return History{}, nil // another tool's history only
		}
		return h, nil
	}
	return History{}, nil
}

// reconcile makes the schema's history agree with what it holds before goose runs (see UpWith).
func reconcile(ctx context.Context, conn *pgx.Conn, out *Outcome) error {
	s := out.Schema
	var own bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema.Qualify(s, schema.VersionTable)).Scan(&own); err != nil {
		return fmt.Errorf("migrate: look up %s: %w", schema.Qualify(s, schema.VersionTable), err)
	}
	if own {
		return nil
	}
	f, err := schema.Read(ctx, conn, s)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	inbox, err := InboxApplied(ctx, conn, s)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if inbox > 0 {
		// The inbox's own set made inbox_events (or adopted it), and 00001 leaves it alone: it
		// is not one of the relay's tables here, so an inbox-only schema is a first install.
		f = f.WithoutInbox()
	}
	if f.Empty() {
		return nil // a first install: a goose_db_version here is another tool's, and stays as it is
	}
	for _, t := range []string{schema.Events, schema.Inbox} {
		if f.ForeignTable(t) {
			return foreignError(f, t)
		}
	}
	legacy, err := readLegacy(ctx, conn, s)
	if err != nil {
		return err
	}
	shape, exact := f.Shape(Latest())
	if len(legacy.relay) > 0 {
		if err := legacy.check(f, shape, exact); err != nil {
			return err
		}
		return moveLegacy(ctx, conn, out, legacy)
	}
	if shape == 0 || !exact {
		return incompleteError(f)
	}
	return adopt(ctx, conn, out, shape)
}

// legacyHistory is what goose_db_version records in a schema.
type legacyHistory struct {
	schema string
	// relay are the applied versions 1 to schema.LegacyLatest, the numbers the relay used, and
	// relayIDs the rows that record them; others are the other applied versions (not 0).
	relay, others []int64
	relayIDs      []int64
}

// readLegacy reads the applied versions of goose_db_version in s (none if it does not exist).
// A version is applied if its latest row says so (goose's older API recorded a rollback as a
// row with is_applied false).
func readLegacy(ctx context.Context, conn *pgx.Conn, s string) (legacyHistory, error) {
	h := legacyHistory{schema: s}
	table := schema.Qualify(s, schema.LegacyVersionTable)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil || !exists {
		return h, err
	}
	rows, err := conn.Query(ctx, `SELECT DISTINCT ON (version_id) id::bigint, version_id, is_applied FROM `+table+`
		WHERE version_id <> 0 ORDER BY version_id, id DESC`)
	if err != nil {
		return h, fmt.Errorf("migrate: read %s: %w", table, err)
	}
	var id, v int64
	var applied bool
	_, err = pgx.ForEachRow(rows, []any{&id, &v, &applied}, func() error {
		switch {
		case !applied:
		case v >= 1 && v <= schema.LegacyLatest:
			h.relay, h.relayIDs = append(h.relay, v), append(h.relayIDs, id)
		default:
			h.others = append(h.others, v)
		}
		return nil
	})
	if err != nil {
		return h, fmt.Errorf("migrate: read %s: %w", table, err)
	}
	return h, nil
}

// minTimestampVersion is the smallest goose timestamp version (YYYYMMDDHHMMSS, 1970): numbers
// that large cannot be the relay's, nor those of an application that numbers as the relay does.
const minTimestampVersion = 19700101000000

// check refuses to guess which rows of goose_db_version are the relay's. They are when the
// relay's tables are there and look exactly like version k, the rows record versions 1 to k
// and no others below goose's timestamps: an application that numbers its migrations 1, 2, 3
// too could own any of them.
func (h legacyHistory) check(f schema.Found, shape int64, exact bool) error {
	k := int64(len(h.relay))
	contiguous := h.relay[k-1] == k
	var sequential []int64
	for _, v := range h.others {
		if v < minTimestampVersion {
			sequential = append(sequential, v)
		}
	}
	var why string
	switch {
	case len(sequential) > 0:
		why = fmt.Sprintf("it also records version(s) %s, numbered as the relay numbers its own (not goose timestamps), "+
			"so an application's migrations may hold some of versions 1 to %d too", joinVersions(sequential), schema.LegacyLatest)
	case !contiguous:
		why = fmt.Sprintf("the versions it records up to %d, %s, have gaps, which `outbox-relay migrate` never leaves",
			schema.LegacyLatest, joinVersions(h.relay))
	case shape != k || !exact:
		why = fmt.Sprintf("it records versions 1 to %d, but the relay's tables look like %s", k, shapeWords(f, shape, exact))
	default:
		return nil
	}
	table := schema.Qualify(h.schema, schema.LegacyVersionTable)
	own := schema.Qualify(h.schema, schema.VersionTable)
	return fmt.Errorf("%w: the relay's tables in schema %s have no %s, and %s cannot be read as the relay's history: %s. "+
		"Nothing was changed. Record the relay's versions yourself, then run `outbox-relay migrate --schema %s` again: "+
		"CREATE TABLE %s (id integer PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY, version_id bigint NOT NULL, "+
		"is_applied boolean NOT NULL, tstamp timestamp NOT NULL DEFAULT now()); "+
		"INSERT INTO %s (version_id, is_applied) SELECT v, true FROM generate_series(0, N) AS v; "+
		"with N the last migration `outbox-relay migrate` applied here (the relay's tables look like version %d), and "+
		"delete from %s the rows of those versions that your application's tool does not own",
		ErrConflict, schema.Quote(h.schema), schema.VersionTable, table, why, h.schema, own, own, shape, table)
}

// shapeWords describes a schema's shape for a message.
func shapeWords(f schema.Found, shape int64, exact bool) string {
	if exact {
		return fmt.Sprintf("version %d", shape)
	}
	return fmt.Sprintf("version %d plus parts of later ones (%s)", shape, schema.List(f.Extra(shape)))
}

// moveLegacy moves the relay's rows from goose_db_version to its own table, in one transaction,
// and drops goose_db_version when nothing else is left in it.
func moveLegacy(ctx context.Context, conn *pgx.Conn, out *Outcome, h legacyHistory) error {
	legacy := schema.Qualify(h.schema, schema.LegacyVersionTable)
	own := schema.Qualify(h.schema, schema.VersionTable)
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := createVersionTable(ctx, tx, own); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+own+` (version_id, is_applied, tstamp)
			SELECT version_id, true, tstamp FROM `+legacy+` WHERE id = ANY($1) ORDER BY id`, h.relayIDs); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+legacy+` WHERE version_id = ANY($1)`, h.relay); err != nil {
			return err
		}
		var rest bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+legacy+` WHERE version_id <> 0)`).Scan(&rest); err != nil {
			return err
		}
		if !rest {
			_, err := tx.Exec(ctx, `DROP TABLE `+legacy)
			out.LegacyDropped = err == nil
			return err
		}
		return nil
	})
	if err != nil {
		out.LegacyDropped = false
		return fmt.Errorf("migrate: move the relay's versions from %s to %s: %w (nothing was changed; run migrate "+
			"as the owner of %s)", legacy, own, err, legacy)
	}
	out.Moved = h.relay
	return nil
}

// adopt records versions 1 to v as applied: the schema holds exactly their tables, columns and
// indexes, without any history.
func adopt(ctx context.Context, conn *pgx.Conn, out *Outcome, v int64) error {
	own := schema.Qualify(out.Schema, schema.VersionTable)
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := createVersionTable(ctx, tx, own); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+own+` (version_id, is_applied) SELECT v, true FROM generate_series(1, $1::bigint) AS v`, v)
		return err
	})
	if err != nil {
		return fmt.Errorf("migrate: record versions 1 to %d in %s: %w", v, own, err)
	}
	for i := int64(1); i <= v; i++ {
		out.Adopted = append(out.Adopted, i)
	}
	return nil
}

// createVersionTable creates the relay's version table as goose does (with its version 0 row),
// so that goose finds and continues it.
func createVersionTable(ctx context.Context, tx pgx.Tx, table string) error {
	_, err := tx.Exec(ctx, `CREATE TABLE `+table+` (
		id integer PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY,
		version_id bigint NOT NULL,
		is_applied boolean NOT NULL,
		tstamp timestamp NOT NULL DEFAULT now()
	)`)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+table+` (version_id, is_applied) VALUES (0, true)`)
	return err
}

// foreignError refuses name (outbox_events or inbox_events), a table of the relay's name
// without the columns its first migration gives it.
func foreignError(f schema.Found, name string) error {
	table := schema.Qualify(f.Schema, name)
	var missing []string
	for _, c := range schema.FirstColumns(name) {
		if !slices.Contains(f.Columns(name), c) {
			missing = append(missing, c)
		}
	}
	return fmt.Errorf("%w: table %s exists but lacks column(s) %s (it has %s), so it was not created by "+
		"`outbox-relay migrate` (another application's table?); nothing was changed. Rename it "+
		"(ALTER TABLE %s RENAME TO %s_old) or migrate into another schema (--schema NAME), then run "+
		"`outbox-relay migrate` again", ErrConflict, table, strings.Join(missing, ", "),
		strings.Join(f.Columns(name), ", "), table, name)
}

func incompleteError(f schema.Found) error {
	var present []string
	for _, name := range schema.Names() {
		if f.Has(name) {
			present = append(present, name)
		}
	}
	return fmt.Errorf("%w: schema %s already has table(s) %s of the relay, without any version history (no %s, and "+
		"none of the relay's versions in %s), and they are not complete for any version: missing %s. They were "+
		"installed by hand or by another tool, partly: apply the Up sections of those migration files the same way "+
		"(or drop the partial tables), then run `outbox-relay migrate --schema %s` again; nothing was changed",
		ErrConflict, schema.Quote(f.Schema), strings.Join(present, ", "), schema.VersionTable, schema.LegacyVersionTable,
		pieceList(f.Missing(Latest(), true)), f.Schema)
}

// pieceList lists pieces for a message, each with the migration file that adds it:
// "column outbox_slots.publication_oid (00010_slot_publication.sql)".
func pieceList(pieces []schema.Piece) string {
	s := make([]string, len(pieces))
	for i, p := range pieces {
		s[i] = p.String() + " (" + Source(p.Since) + ")"
	}
	return strings.Join(s, ", ")
}

func joinVersions(vs []int64) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
}
