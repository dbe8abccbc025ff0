// Package inboxmigrate installs and upgrades the inbox's table in a consumer's database: what
// `outbox-relay migrate --inbox-only` runs, for a service that does not ship the relay. It is a
// package of its own so that a program that only mounts the inbox (package inbox) links no
// migration framework.
package inboxmigrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/migrations"
)

var errNilDB = errors.New("inbox: no database (a nil pool)")

// Migrate creates or upgrades what the inbox needs in the database behind db, and nothing of
// the outbox: inbox_events and its indexes, in cfg.Schema (or the connection's
// current_schema() when it is empty; Migrate reads no other field of cfg). It is what
// `outbox-relay migrate --inbox-only` runs, for a consumer service that does not ship the
// relay: call it at start-up, from as many replicas at once as you like (a PostgreSQL
// advisory lock serialises them). It returns the versions it applied, none when the schema
// was up to date.
//
// Its versions are recorded in their own table, migrations.InboxHistoryTable, in the same
// schema: an application's goose_db_version, and the relay's history, are never touched. A
// database where `outbox-relay migrate` already made inbox_events keeps that table and its
// rows; a table of that name with other columns is refused with migrations.ErrConflict. The
// schema must exist.
//
// Migrate uses two connections of db at a time: one holds the lock, the other builds an
// index without blocking deliveries.
func Migrate[P inbox.Pool](ctx context.Context, db P, cfg inbox.Config) ([]migrations.Result, error) {
	var sqlDB *sql.DB
	switch d := any(db).(type) {
	case *pgxpool.Pool:
		if d == nil {
			return nil, errNilDB
		}
		if n := d.Config().MaxConns; n < 2 {
			return nil, fmt.Errorf("inbox: migrate needs a pool of at least 2 connections, this one has MaxConns %d", n)
		}
		sqlDB = stdlib.OpenDBFromPool(d) // closing it leaves the pool open
		defer sqlDB.Close()
	case *sql.DB:
		if d == nil {
			return nil, errNilDB
		}
		if n := d.Stats().MaxOpenConnections; n == 1 {
			return nil, fmt.Errorf("inbox: migrate needs a *sql.DB of at least 2 connections, this one has SetMaxOpenConns(%d)", n)
		}
		sqlDB = d
	}
	res, err := migrations.UpInbox(ctx, sqlDB, cfg.Schema)
	if err != nil {
		return res, fmt.Errorf("inbox: %w", err)
	}
	return res, nil
}
