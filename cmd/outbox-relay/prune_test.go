package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// seedPrunable writes 25 done rows processed two days ago and one row of every other kind.
func seedPrunable(t *testing.T) (string, *pgxpool.Pool, func() map[string]int) {
	t.Helper()
	dsn, pool := migratedDB(t)
	mustExec(t, pool, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status,
		created_at, available_at, processed_at)
		SELECT 'order', g::text, 'order.created', '{}', 'done', now() - interval '49 hours', now() - interval '49 hours',
		       now() - interval '48 hours'
		FROM generate_series(1, 25) g`)
	mustExec(t, pool, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status,
		created_at, available_at, processed_at)
		VALUES ('order', 'recent', 'x', '{}', 'done', now() - interval '2 hours', now() - interval '2 hours', now() - interval '1 hour'),
		       ('order', 'p', 'x', '{}', 'pending', now() - interval '3 days', now() - interval '3 days', NULL),
		       ('order', 'f', 'x', '{}', 'failed', now() - interval '3 days', now() - interval '3 days', now() - interval '3 days'),
		       ('order', 'k', 'x', '{}', 'parked', now() - interval '3 days', now() - interval '3 days', now() - interval '3 days')`)
	counts := func() map[string]int {
		got := map[string]int{}
		rows, err := pool.Query(context.Background(), `SELECT status, count(*) FROM outbox_events GROUP BY status`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			var n int
			if err := rows.Scan(&s, &n); err != nil {
				t.Fatal(err)
			}
			got[s] = n
		}
		return got
	}
	return dsn, pool, counts
}

func TestPruneCommand(t *testing.T) {
	dsn, pool, counts := seedPrunable(t)

	out, errOut, code := cli(t, "prune", "--dsn", dsn, "--older-than", "24h", "--dry-run")
	if code != 0 || !strings.HasPrefix(out, "would delete 25 rows every pipeline is done with, older than ") {
		t.Fatalf("dry run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := counts(); got["done"] != 26 {
		t.Fatalf("dry run deleted rows: %v", got)
	}

	out, errOut, code = cli(t, "prune", "--dsn", dsn, "--older-than", "24h", "--batch-size", "10")
	if code != 0 || !strings.HasPrefix(out, "deleted 25 rows every pipeline is done with, older than ") || !strings.HasSuffix(out, " in 3 batches\n") {
		t.Fatalf("prune: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := counts(); len(got) != 4 || got["done"] != 1 || got["pending"] != 1 || got["failed"] != 1 || got["parked"] != 1 {
		t.Fatalf("left %v, want one row of each status", got)
	}

	// A slot that confirms nothing holds back what is written after it, and prune says so.
	mustExec(t, pool, `SELECT pg_create_logical_replication_slot('stopped', 'pgoutput')`)
	mustExec(t, pool, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, available_at, processed_at)
		VALUES ('order', 'late', 'x', '{}', 'done', now() - interval '3 days', now() - interval '3 days')`)
	out, errOut, code = cli(t, "prune", "--dsn", dsn, "--older-than", "24h")
	if code != 0 || !strings.Contains(out, "deleted 1 rows") || !strings.Contains(out, "kept 1 older rows slot stopped has not confirmed") {
		t.Fatalf("prune behind a slot: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestPruneCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"prune", "--dsn", "postgres://localhost/x"},
		{"prune", "--dsn", "postgres://localhost/x", "--older-than", "0s"},
		{"prune", "--dsn", "postgres://localhost/x", "--older-than", "7d"},
		{"prune", "--dsn", "postgres://localhost/x", "--older-than", "1h", "--batch-size", "0"},
	} {
		if _, errOut, code := cli(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d (%s), want %d", args, code, errOut, exitUsage)
		}
	}
}

func TestPruneCommandWithoutSchema(t *testing.T) {
	_, errOut, code := cli(t, "prune", "--dsn", pgtest.NewDB(t), "--older-than", "1h")
	if code != 1 || !strings.Contains(errOut, "run `outbox-relay migrate`") {
		t.Fatalf("exit %d, stderr %q; want 1 and to run migrate", code, errOut)
	}
}
