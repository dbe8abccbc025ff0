// Package migrations holds the versioned schema that producers, the relay and consumers share,
// embedded in the binary and applied with goose.
//
// # Rules
//
// A shipped migration is never edited: later needs come as new files, and they only add
// (columns, indexes), so the outbox_events and inbox_events tables keep the columns they were
// first created with.
//
// # Where
//
// The tables go into one PostgreSQL schema (Options.Schema, or the connection's
// current_schema()), and the applied versions into a table of their own there,
// outbox_relay_schema, never into goose_db_version: an application that uses goose itself keeps
// its history to itself. A database migrated by a release that recorded the relay's versions in
// goose_db_version is upgraded in place: Up moves those rows (and only those) to
// outbox_relay_schema first (see UpWith).
//
// # The inbox set
//
// UpInbox applies a second, smaller set to a consumer's database: inbox_events and its indexes,
// nothing of the outbox, recorded in its own history table (InboxHistoryTable) in the inbox's
// schema. Either set may come first. The inbox set adopts an inbox_events that 00001 created
// (after checking its columns), and the relay's set leaves alone one that the inbox set
// created: UpWith does not count it among the relay's tables, and 00001 creates it only if it
// does not exist. Later changes to inbox_events belong to the inbox set only.
//
// # Concurrency
//
// Up holds a PostgreSQL session advisory lock for the whole run, the checks of what the schema
// already holds included, so two processes migrating the same database at once apply each
// version exactly once; the second waits, then finds nothing to do. UpInbox takes the same lock
// (from its first version to its last), so the two sets never run at once on one database.
// The lock is the relay's own, not goose's default: an application's goose does not wait for
// it, and neither does the `migrate` of a release before outbox_relay_schema, which took goose's
// default lock, so such a release's migrate must never run beside this one.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

//go:embed *.sql
var files embed.FS

// Files returns the migration files (NNNNN_name.sql, goose's format: a `-- +goose Up` section,
// then a `-- +goose Down` one), for installing the schema with another tool. The relay accepts
// a schema installed that way when it has every table, column and index of these files.
func Files() fs.FS { return files }

// Result is one applied migration.
type Result struct {
	Version int64
	Source  string
}

// Options say where UpWith works.
type Options struct {
	// Schema is the PostgreSQL schema that gets the relay's tables and its version table; UpWith
	// creates it if it does not exist. Empty: the connection's current_schema() (the first
	// schema on its search_path that exists).
	Schema string
}

// Outcome is what UpWith did.
type Outcome struct {
	// Schema is the schema migrated.
	Schema string
	// Applied are the migrations applied, in order.
	Applied []Result
	// Moved are the relay's versions moved from goose_db_version to outbox_relay_schema (a
	// database migrated by a release that recorded them there); LegacyDropped says that
	// goose_db_version held nothing else and was dropped.
	Moved         []int64
	LegacyDropped bool
	// Adopted are versions recorded as applied without running them: the schema already had
	// their tables, columns and indexes, and no history (installed from the files by another
	// tool).
	Adopted []int64
}

// Up applies every pending migration to the database at dsn, in the connection's
// current_schema(), and returns those it applied. Running it again is a no-op.
func Up(ctx context.Context, dsn string) ([]Result, error) {
	out, err := UpWith(ctx, dsn, Options{})
	return out.Applied, err
}

// UpWith applies every pending migration to the database at dsn, in opts.Schema. Before goose
// runs, and under the same lock, it reconciles what the schema holds with its history: a
// schema without outbox_relay_schema whose goose_db_version holds the relay's versions 1 to 10
// has those rows moved; one whose tables are complete up to some version, without any history,
// has those versions recorded; anything else that is already there (another application's
// outbox_events, an incomplete set of the relay's tables, a goose_db_version that cannot be
// told apart from an application's) is refused, naming the fix, with nothing changed.
func UpWith(ctx context.Context, dsn string, opts Options) (Outcome, error) {
	var out Outcome
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return out, fmt.Errorf("migrate: bad DSN (set DB_DSN or --dsn to a postgres:// URL): %w", err)
	}
	lockConn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return out, fmt.Errorf("migrate: connect: %w", err)
	}
	defer lockConn.Close(context.Background())
	unlock, err := lock(ctx, lockConn)
	if err != nil {
		return out, err
	}
	defer unlock()
	if out.Schema, err = target(ctx, lockConn, opts.Schema); err != nil {
		return out, err
	}
	if err := reconcile(ctx, lockConn, &out); err != nil {
		return out, err
	}
	db := open(cfg, out.Schema)
	defer db.Close()
	p, err := provider(db)
	if err != nil {
		return out, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return out, fmt.Errorf("migrate: %w", err)
	}
	for _, r := range results {
		out.Applied = append(out.Applied, Result{Version: r.Source.Version, Source: r.Source.Path})
	}
	return out, nil
}

// Version returns the highest version applied in the connection's current_schema(), or 0 for
// a schema never migrated.
func Version(ctx context.Context, dsn string) (int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	s, err := schema.Resolve(ctx, conn, "")
	if err != nil {
		return 0, err
	}
	h, err := ReadHistory(ctx, conn, s)
	return h.Version, err
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

// Source returns the file name of migration version v ("00009_reshard.sql"), or "" if this
// binary has none.
func Source(v int64) string {
	entries, _ := files.ReadDir(".")
	for _, e := range entries {
		if n, err := goose.NumericComponent(e.Name()); err == nil && n == v {
			return e.Name()
		}
	}
	return ""
}

// target returns the schema to migrate: name, created if missing, or current_schema().
func target(ctx context.Context, conn *pgx.Conn, name string) (string, error) {
	if name == "" {
		return schema.Resolve(ctx, conn, "")
	}
	if err := schema.Create(ctx, conn, name); err != nil {
		return "", fmt.Errorf("migrate: %w", err)
	}
	return name, nil
}

// open returns a one-connection database/sql handle for goose whose search_path is s alone, so
// that the files' unqualified names create and alter the tables there, and goose keeps its
// version table there.
func open(cfg *pgx.ConnConfig, s string) *sql.DB {
	setPath := stdlib.OptionAfterConnect(func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SET search_path TO "+schema.Quote(s))
		return err
	})
	db := stdlib.OpenDB(*cfg, setPath)
	db.SetMaxOpenConns(1)
	return db
}

// provider runs the embedded files, recording them in schema.VersionTable. It takes no lock of
// its own: UpWith holds one for the whole run.
func provider(db *sql.DB) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithTableName(schema.VersionTable))
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return p, nil
}

// lockKey is the advisory lock every `outbox-relay migrate` of a database takes ("outbox" in
// ASCII), for the relay's set (UpWith) and the inbox's (UpInbox) alike: another than goose's
// default, so an application's own goose run does not wait for it. Releases that recorded the
// relay's versions in goose_db_version took goose's default lock instead, so their migrate and
// this one do not exclude each other (docs/operations/maintenance.md, Upgrades).
const lockKey = 0x6f7574626f78

// lock takes the advisory lock on conn, waiting for another migrate to finish, and returns
// what releases it.
func lock(ctx context.Context, conn *pgx.Conn) (func(), error) {
	err := waitLock(ctx, func(ctx context.Context) (bool, error) {
		var ok bool
		err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(lockKey)).Scan(&ok)
		return ok, err
	})
	if err != nil {
		return nil, fmt.Errorf("migrate: take the migration lock: %w", err)
	}
	return func() {
		_, _ = conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", int64(lockKey))
	}, nil
}

// lockPollMax caps the pause between two tries of the migration lock.
const lockPollMax = time.Second

// waitLock calls try until it takes the lock, fails, or ctx ends, pausing between tries. The
// lock is polled, never waited for in pg_advisory_lock: a session waiting there holds a
// snapshot for as long as it waits, and CREATE INDEX CONCURRENTLY (migration 00011, the inbox's
// version 2) waits for every older snapshot to end, so a migrate building an index under the
// lock and one waiting for the lock would wait for each other forever.
func waitLock(ctx context.Context, try func(context.Context) (bool, error)) error {
	wait := 10 * time.Millisecond
	for {
		ok, err := try(ctx)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, lockPollMax)
	}
}
