// Package migrations holds the versioned schema that producers, the relay and consumers share,
// embedded in the binary and applied with goose.
//
// # Rules
//
// A shipped migration is never edited: later needs come as new files, and they only add
// (columns, indexes), so the outbox_events and inbox_events tables keep the columns they were
// first created with. Applied versions are recorded in goose_db_version.
//
// # The inbox set
//
// UpInbox applies a second, smaller set to a consumer's database: inbox_events and its indexes,
// nothing of the outbox, recorded in its own history table (InboxHistoryTable) in the inbox's
// schema. Either set may come first. The inbox set adopts an inbox_events that 00001 created
// (after checking its columns), and 00001 leaves alone one that the inbox set created. Later
// changes to inbox_events belong to the inbox set only.
//
// # Concurrency
//
// Up holds a PostgreSQL session advisory lock for the whole run, so two processes migrating the
// same database at once apply each version exactly once; the second waits, then finds nothing to
// do. UpInbox takes the same lock, so the two sets never run at once on one database.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// Result is one applied migration.
type Result struct {
	Version int64
	Source  string
}

// Up applies every pending migration to the database at dsn and returns those it applied.
// Running it again is a no-op.
func Up(ctx context.Context, dsn string) ([]Result, error) {
	db, err := open(dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := checkConflict(ctx, sqlQuerier{db}); err != nil {
		return nil, err
	}
	p, err := provider(db)
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	out := make([]Result, 0, len(results))
	for _, r := range results {
		out = append(out, Result{Version: r.Source.Version, Source: r.Source.Path})
	}
	return out, nil
}

// Version returns the highest applied version, or 0 for a database never migrated.
func Version(ctx context.Context, dsn string) (int64, error) {
	db, err := open(dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	p, err := provider(db)
	if err != nil {
		return 0, err
	}
	return p.GetDBVersion(ctx)
}

// Latest is the highest version embedded in this binary: the schema version the relay needs.
func Latest() int64 {
	var latest int64
	entries, _ := files.ReadDir(".")
	for _, e := range entries {
		if v, err := goose.NumericComponent(e.Name()); err == nil {
			latest = max(latest, v)
		}
	}
	return latest
}

// Querier runs one query; *pgx.Conn, *pgxpool.Pool and pgx.Tx satisfy it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Applied returns the highest version recorded in goose_db_version (on search_path), or 0 when
// the table does not exist. Unlike Version it creates nothing, so a check leaves no trace.
func Applied(ctx context.Context, q Querier) (int64, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("look up goose_db_version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int64
	// The table is named in a second query: a query naming a missing table fails as it is parsed.
	if err := q.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read the schema version from goose_db_version: %w", err)
	}
	return v, nil
}

// ErrConflict is wrapped by Up's error when the database already has a table the first
// migration creates, but no migration was ever recorded: another application's table. Up then
// changes nothing.
var ErrConflict = errors.New("a table the relay's schema needs already exists")

// firstTables are the tables migration 00001 creates.
var firstTables = []string{"outbox_events", "inbox_events"}

// checkConflict refuses to migrate a database that was never migrated but already has one of
// firstTables: the first migration would fail on it, or the later ones would alter a table that
// is not the relay's.
func checkConflict(ctx context.Context, q Querier) error {
	applied, err := Applied(ctx, q)
	if err != nil || applied > 0 {
		return err
	}
	inbox, err := InboxApplied(ctx, q, "")
	if err != nil {
		return err
	}
	for _, t := range firstTables {
		if t == "inbox_events" && inbox > 0 {
			continue // the inbox set made it, with 00001's definition, which leaves it alone
		}
		var exists bool
		if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t).Scan(&exists); err != nil {
			return fmt.Errorf("look up %s: %w", t, err)
		}
		if exists {
			return fmt.Errorf("%w: table %s exists, but goose_db_version records no migration, so it was not created by "+
				"`outbox-relay migrate` (another application's table?); nothing was changed. Rename it "+
				"(ALTER TABLE %s RENAME TO %s_old) or migrate another database, or another schema first on search_path, "+
				"then run `outbox-relay migrate` again", ErrConflict, t, t, t)
		}
	}
	return nil
}

// sqlQuerier lets Applied and checkConflict read through database/sql.
type sqlQuerier struct{ db *sql.DB }

func (q sqlQuerier) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return q.db.QueryRowContext(ctx, query, args...)
}

func open(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("migrate: bad DSN (set DB_DSN or --dsn to a postgres:// URL): %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	// The advisory lock is held by one session: keep the pool to a single connection.
	db.SetMaxOpenConns(1)
	return db, nil
}

func provider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return p, nil
}
