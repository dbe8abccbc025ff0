package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// The schedule's last fault may restart the server just before the final reads, while the
// consumer's pool holds connections the receiver used less than a second ago (so pgxpool does
// not ping them): the reads must come back with the table, not with the dead connection's
// error. CI failed once on exactly this (TestTortureTwoPipelines, "read applied: write failed:
// broken pipe").
func TestReadRetryingOutlivesAServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	name, err := cluster.CreateDatabase(ctx, "restart")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(cluster.DSN(name))
	if err != nil {
		t.Fatal(err)
	}
	// Connections used moments ago: never pinged on acquire.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE applied (n int); INSERT INTO applied VALUES (1), (2)`); err != nil {
		t.Fatal(err)
	}
	const idle = 4
	warm := func() {
		var wg sync.WaitGroup
		for range idle {
			wg.Go(func() {
				if _, err := pool.Exec(ctx, `SELECT pg_sleep(0.05)`); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	count := func() (int, error) {
		var n int
		return n, pool.QueryRow(ctx, `SELECT count(*) FROM applied`).Scan(&n)
	}

	// Without the retry the first read fails: the test can tell the fix from its absence.
	warm()
	if err := cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := count(); err == nil {
		t.Fatal("a read on a connection from before the restart succeeded: the test no longer reproduces the failure")
	}

	pool.Reset() // the other connections from before the first restart
	warm()
	if err := cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := readRetrying(ctx, func() (err error) { n, err = count(); return err }); err != nil {
		t.Fatalf("readRetrying after a restart: %v", err)
	}
	if n != 2 {
		t.Fatalf("read %d rows, want 2", n)
	}

	// A query the server refuses is not retried for readRetryLimit.
	start := time.Now()
	if err := readRetrying(ctx, func() error { _, err := pool.Exec(ctx, `SELECT * FROM missing`); return err }); err == nil {
		t.Fatal("a query on a missing table succeeded")
	}
	if d := time.Since(start); d > readRetryLimit/2 {
		t.Fatalf("a refused query was retried for %s", d)
	}
}
