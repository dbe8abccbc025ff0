// Package migrations holds the versioned schema that producers, the relay and consumers share,
// embedded in the binary and applied with goose.
//
// # Rules
//
// A shipped migration is never edited: later needs come as new files, and they only add
// (columns, indexes), so the outbox_events and inbox_events tables keep the columns they were
// first created with. Applied versions are recorded in goose_db_version.
//
// # Concurrency
//
// Up holds a PostgreSQL session advisory lock for the whole run, so two processes migrating the
// same database at once apply each version exactly once; the second waits, then finds nothing to
// do.
package migrations

import (
	"context"
	"database/sql"
	"embed"
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
