package relaytest

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// LegacyMigrate migrates the database at dsn as the releases before the relay's own version
// table did: the embedded files up to schema.LegacyLatest, recorded in goose_db_version in the
// connection's current_schema(), under goose's session lock (the provider setup of those
// releases). The upgrade tests build "a database of the last release" with it, from the same
// files, so it cannot drift from what that release did.
func LegacyMigrate(ctx context.Context, dsn string) error {
	return withDB(dsn, func(db *sql.DB) error {
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return err
		}
		p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.Files(), goose.WithSessionLocker(locker))
		if err != nil {
			return err
		}
		_, err = p.UpTo(ctx, schema.LegacyLatest)
		return err
	})
}

// GooseUp runs an application's own goose migrations (files in fsys) on the database at dsn,
// recorded in goose's default goose_db_version, as an application that uses goose does.
func GooseUp(ctx context.Context, dsn string, fsys fs.FS) error {
	return withDB(dsn, func(db *sql.DB) error {
		p, err := goose.NewProvider(goose.DialectPostgres, db, fsys)
		if err != nil {
			return err
		}
		_, err = p.Up(ctx)
		return err
	})
}

func withDB(dsn string, f func(*sql.DB) error) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	db.SetMaxOpenConns(1)
	return f(db)
}

// ApplyUpSections installs the schema as a tool that only runs SQL does (psql -f, Flyway,
// Atlas): the `-- +goose Up` section of each migration file up to version upTo, in order, each
// as one simple-protocol statement list, with the connection's search_path; it records no
// history. A file marked `-- +goose NO TRANSACTION` (CREATE INDEX CONCURRENTLY) goes one
// statement at a time, as psql -f sends it: a statement list is one implicit transaction.
func ApplyUpSections(ctx context.Context, dsn string, upTo int64) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	names, err := fs.Glob(migrations.Files(), "*.sql")
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		if err != nil || v > upTo {
			continue
		}
		b, err := fs.ReadFile(migrations.Files(), name)
		if err != nil {
			return err
		}
		up, ok := upSection(string(b))
		if !ok {
			return fmt.Errorf("%s: no -- +goose Up section", name)
		}
		stmts := []string{up}
		if strings.Contains(string(b), "-- +goose NO TRANSACTION") {
			stmts = strings.Split(up, ";\n") // these files hold no function bodies
		}
		for _, stmt := range stmts {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := conn.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

// upSection returns the text between `-- +goose Up` and `-- +goose Down`.
func upSection(file string) (string, bool) {
	_, rest, ok := strings.Cut(file, "-- +goose Up")
	if !ok {
		return "", false
	}
	up, _, _ := strings.Cut(rest, "-- +goose Down")
	return up, true
}
