package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// dbActivity is what a row's database counted (pg_stat_database, pg_stat_user_tables):
// transactions committed and rows written (inserted, updated or deleted) per table. Between two
// readings around a relay run, it says where the backends' CPU went: the done marks, the
// endpoints' status and versions, or more statements for the same rows.
type dbActivity struct {
	Commits int64
	Writes  map[string]int64 // table → rows written
	// Inserted, Updated and Deleted split Writes by operation (a table absent from one has
	// none of that operation).
	Inserted, Updated, Deleted map[string]int64
	// WALRecords and WALBytes are the whole cluster's (pg_stat_wal): what the row's database
	// wrote, as long as no other database of the cluster is busy meanwhile.
	WALRecords, WALBytes int64
}

// activity reads the counters. It first flushes this connection's own pending counters (a
// backend publishes them at most once a second, or when it exits), so that a reading taken
// before the relay starts includes the backlog written just before.
func (db *benchDB) activity(ctx context.Context) (dbActivity, error) {
	a := dbActivity{Writes: map[string]int64{}, Inserted: map[string]int64{}, Updated: map[string]int64{}, Deleted: map[string]int64{}}
	if _, err := db.conn.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		return a, fmt.Errorf("flush statistics (PostgreSQL 15 or later): %w", err)
	}
	if err := db.conn.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).
		Scan(&a.Commits); err != nil {
		return a, fmt.Errorf("read pg_stat_database: %w", err)
	}
	if err := db.conn.QueryRow(ctx, `SELECT wal_records, wal_bytes::bigint FROM pg_stat_wal`).
		Scan(&a.WALRecords, &a.WALBytes); err != nil {
		return a, fmt.Errorf("read pg_stat_wal: %w", err)
	}
	rows, err := db.conn.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables`)
	if err != nil {
		return a, fmt.Errorf("read pg_stat_user_tables: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var table string
		var ins, upd, del int64
		if err := rows.Scan(&table, &ins, &upd, &del); err != nil {
			return a, err
		}
		a.Writes[table] = ins + upd + del
		a.Inserted[table], a.Updated[table], a.Deleted[table] = ins, upd, del
	}
	return a, rows.Err()
}

// waitAlone waits (up to limit) until no other session is connected to the database, so that
// the relay's backends and walsender have exited and published their counters.
func (db *benchDB) waitAlone(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var others int
		err := db.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others)
		if err != nil {
			return fmt.Errorf("read pg_stat_activity: %w", err)
		}
		if others == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sessions still connected to %s %s after the relay stopped", others, db.name, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// minus is what was counted between b and a. The readings' own statements (a handful) are
// included.
func (a dbActivity) minus(b dbActivity) dbActivity {
	return dbActivity{Commits: a.Commits - b.Commits, Writes: mapMinus(a.Writes, b.Writes),
		Inserted: mapMinus(a.Inserted, b.Inserted), Updated: mapMinus(a.Updated, b.Updated),
		Deleted: mapMinus(a.Deleted, b.Deleted), WALRecords: a.WALRecords - b.WALRecords, WALBytes: a.WALBytes - b.WALBytes}
}

// mapMinus is a - b per key, without the keys whose difference is zero.
func mapMinus(a, b map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for t, n := range a {
		if n -= b[t]; n != 0 {
			d[t] = n
		}
	}
	return d
}

// note describes the activity per 1,000 events: transactions, then rows written by table,
// most first.
func (a dbActivity) note(events int) string {
	per1k := func(n int64) string { return fmt.Sprintf("%.1f", float64(n)*1000/float64(events)) }
	tables := make([]string, 0, len(a.Writes))
	for t := range a.Writes {
		tables = append(tables, t)
	}
	slices.SortFunc(tables, func(x, y string) int {
		if c := a.Writes[y] - a.Writes[x]; c != 0 {
			return int(max(min(c, 1), -1))
		}
		return strings.Compare(x, y)
	})
	parts := make([]string, len(tables))
	for i, t := range tables {
		parts[i] = t + " " + per1k(a.Writes[t])
	}
	s := "per 1k events, PostgreSQL committed " + per1k(a.Commits) + " transactions"
	if len(parts) > 0 {
		s += " and wrote rows of " + strings.Join(parts, ", ")
	}
	return s
}
