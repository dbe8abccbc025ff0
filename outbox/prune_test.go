package outbox_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// rows inserts n outbox rows with status, created age+1m ago and processed age ago (if done).
func rows(t testing.TB, conn *pgx.Conn, n int, status string, age time.Duration) {
	t.Helper()
	_, err := conn.Exec(context.Background(), `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at, available_at, processed_at)
		SELECT 'order', g::text, 'order.changed', '{}', $2,
		       now() - make_interval(secs => $3 + 60), now() - make_interval(secs => $3 + 60),
		       CASE WHEN $2 = 'done' THEN now() - make_interval(secs => $3) END
		FROM generate_series(1, $1) g`, n, status, age.Seconds())
	if err != nil {
		t.Fatal(err)
	}
}

func countByStatus(t *testing.T, conn *pgx.Conn) map[string]int {
	t.Helper()
	got := map[string]int{}
	r, _ := conn.Query(context.Background(), `SELECT status, count(*) FROM outbox_events GROUP BY status`)
	var s string
	var n int
	if _, err := pgx.ForEachRow(r, []any{&s, &n}, func() error { got[s] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestPruneDeletesOldDoneRowsInBatches(t *testing.T) {
	for _, tc := range []struct {
		name        string
		old, batch  int
		wantBatches int
	}{
		{"2500 in batches of 1000", 2500, 1000, 3},
		{"a last batch that finds nothing", 2000, 1000, 3},
		{"nothing to prune", 0, 1000, 1},
		{"default batch size", 1500, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, conn := migratedDB(t)
			const age = 10 * 24 * time.Hour
			rows(t, conn, tc.old, "done", age)
			rows(t, conn, 7, "done", time.Hour) // recent
			// ... and delivered late: created before every old row, so the index visits them first.
			if _, err := conn.Exec(context.Background(), `UPDATE outbox_events
				SET created_at = now() - interval '20 days', available_at = now() - interval '20 days'
				WHERE processed_at > now() - interval '2 hours'`); err != nil {
				t.Fatal(err)
			}
			for _, s := range []string{"pending", "failed", "parked"} {
				rows(t, conn, 3, s, age)
			}
			// Make failed and parked rows look processed long ago too: status alone protects them.
			if _, err := conn.Exec(context.Background(), `UPDATE outbox_events SET processed_at = now() - interval '30 days'
				WHERE status IN ('failed', 'parked')`); err != nil {
				t.Fatal(err)
			}
			opts := outbox.PruneOptions{OlderThan: 7 * 24 * time.Hour, BatchSize: tc.batch}

			dry := opts
			dry.DryRun = true
			res, err := outbox.Prune(context.Background(), conn, dry)
			if err != nil || res.Deleted != int64(tc.old) || res.Batches != 0 {
				t.Fatalf("dry run: %+v %v, want %d counted and no batch", res, err, tc.old)
			}
			if n := count(t, conn); n != tc.old+16 {
				t.Fatalf("dry run left %d rows, want all %d", n, tc.old+16)
			}

			res, err = outbox.Prune(context.Background(), conn, opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.Deleted != int64(tc.old) || res.Batches != tc.wantBatches {
				t.Errorf("deleted %d in %d batches, want %d in %d", res.Deleted, res.Batches, tc.old, tc.wantBatches)
			}
			if d := time.Since(res.Cutoff) - opts.OlderThan; d < 0 || d > time.Minute {
				t.Errorf("cutoff %s is not about now minus %s", res.Cutoff, opts.OlderThan)
			}
			want := map[string]int{"done": 7, "pending": 3, "failed": 3, "parked": 3}
			if got := countByStatus(t, conn); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("left %v, want %v", got, want)
			}
		})
	}
}

func TestPruneSkipsLockedRows(t *testing.T) {
	dsn, conn := migratedDB(t)
	ctx := context.Background()
	rows(t, conn, 50, "done", 48*time.Hour)
	other, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT id FROM outbox_events ORDER BY id LIMIT 5 FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a prune that waited on the lock would hang
	defer cancel()
	res, err := outbox.Prune(ctx, conn, outbox.PruneOptions{OlderThan: 24 * time.Hour, BatchSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 45 || count(t, conn) != 5 {
		t.Fatalf("deleted %d, %d left; want 45 deleted and the 5 locked rows left", res.Deleted, count(t, conn))
	}
}

// The relay's publication publishes inserts only, so pruning sends nothing down the stream. A
// second publication that publishes deletes shows that the check can see them.
func TestPruneDeletesAreNotStreamed(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	rows(t, conn, 30, "done", 48*time.Hour)
	for _, stmt := range []string{
		`CREATE PUBLICATION relay_pub FOR TABLE outbox_events WITH (publish = 'insert')`,
		`CREATE PUBLICATION all_pub FOR TABLE outbox_events`,
		`SELECT pg_create_logical_replication_slot('relay_slot', 'pgoutput')`,
		`SELECT pg_create_logical_replication_slot('all_slot', 'pgoutput')`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	res, err := outbox.Prune(ctx, conn, outbox.PruneOptions{OlderThan: 24 * time.Hour, BatchSize: 10})
	if err != nil || res.Deleted != 30 {
		t.Fatalf("prune: %+v %v", res, err)
	}
	if _, err := outbox.Enqueue(ctx, conn, order("after-prune")); err != nil {
		t.Fatal(err)
	}
	messages := func(slot, pub string) map[string]int {
		got := map[string]int{}
		r, _ := conn.Query(ctx, `SELECT chr(get_byte(data, 0)), count(*)
			FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $2)
			GROUP BY 1`, slot, pub)
		var kind string
		var n int
		if _, err := pgx.ForEachRow(r, []any{&kind, &n}, func() error { got[kind] = n; return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := messages("relay_slot", "relay_pub"); got["D"] != 0 || got["I"] != 1 {
		t.Errorf("relay publication streamed %v: want no D (delete) and the one I (insert)", got)
	}
	if got := messages("all_slot", "all_pub"); got["D"] != 30 {
		t.Errorf("control publication streamed %v: want 30 D (delete) messages", got)
	}
}

// A row the status owner delivered ('done') but another pipeline dead-lettered or parked is
// kept: that pipeline's replay reads it. Once the replay delivered it (its entry is gone), or
// when that pipeline only abandoned it (a shadow, never replayed), it is pruned like any other.
func TestPruneKeepsRowsAnotherPipelineStillNeeds(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	rows(t, conn, 10, "done", 10*24*time.Hour)
	if _, err := conn.Exec(ctx, `INSERT INTO outbox_pipeline_events (pipeline, event_id, status)
		SELECT 'audit', id, CASE WHEN aggregate_id::int <= 2 THEN 'failed' WHEN aggregate_id::int <= 4 THEN 'parked' ELSE 'abandoned' END
		FROM outbox_events WHERE aggregate_id::int <= 6`); err != nil {
		t.Fatal(err)
	}
	res, err := outbox.Prune(ctx, conn, outbox.PruneOptions{OlderThan: 24 * time.Hour, DryRun: true})
	if err != nil || res.Deleted != 6 {
		t.Fatalf("dry run: %d rows (%v), want 6", res.Deleted, err)
	}
	if res, err = outbox.Prune(ctx, conn, outbox.PruneOptions{OlderThan: 24 * time.Hour}); err != nil || res.Deleted != 6 {
		t.Fatalf("pruned %d rows (%v), want 6 (10 done, 4 still needed by pipeline audit)", res.Deleted, err)
	}
	var kept []string
	r, _ := conn.Query(ctx, `SELECT aggregate_id FROM outbox_events ORDER BY aggregate_id::int`)
	var id string
	if _, err := pgx.ForEachRow(r, []any{&id}, func() error { kept = append(kept, id); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(kept, ",") != "1,2,3,4" {
		t.Fatalf("kept rows of aggregates %v, want 1,2,3,4 (audit's failed and parked)", kept)
	}
	// audit's replay delivered them: their entries go, and so do the rows.
	if _, err := conn.Exec(ctx, `DELETE FROM outbox_pipeline_events WHERE status <> 'abandoned'`); err != nil {
		t.Fatal(err)
	}
	if res, err = outbox.Prune(ctx, conn, outbox.PruneOptions{OlderThan: 24 * time.Hour}); err != nil || res.Deleted != 4 {
		t.Fatalf("after the replay pruned %d rows (%v), want 4", res.Deleted, err)
	}
}

// A row listed in a backfill not finished is kept: that pipeline has yet to deliver it, though
// the status owner did. Once the backfill is done (its list deleted), it goes.
func TestPruneKeepsRowsABackfillStillNeeds(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	rows(t, conn, 10, "done", 10*24*time.Hour)
	if _, err := conn.Exec(ctx, `INSERT INTO outbox_backfill (slot, position, event_id)
		SELECT 'outbox_relay_audit', row_number() OVER (ORDER BY id), id FROM outbox_events WHERE aggregate_id::int <= 4`); err != nil {
		t.Fatal(err)
	}
	opts := outbox.PruneOptions{OlderThan: 24 * time.Hour}
	if res, err := outbox.Prune(ctx, conn, opts); err != nil || res.Deleted != 6 {
		t.Fatalf("pruned %d rows (%v), want 6 (10 done, 4 still to backfill)", res.Deleted, err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM outbox_backfill`); err != nil {
		t.Fatal(err)
	}
	if res, err := outbox.Prune(ctx, conn, opts); err != nil || res.Deleted != 4 {
		t.Fatalf("after the backfill pruned %d rows (%v), want 4", res.Deleted, err)
	}
}

// advance moves slot to the current WAL position as a relay that delivered everything would,
// with a running-transactions record in between, so that its catalog_xmin follows.
func advance(t *testing.T, conn *pgx.Conn, slot string) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())", slot); err != nil {
		t.Fatal(err)
	}
}

// Every slot of the database stands for a pipeline, running or not: rows written after a slot's
// position are kept, done or pending, and reported; rows from before it (or that it confirmed
// since) are pruned, pending ones too, as no pipeline needs them. Without any slot, pending
// rows are kept (nothing read them yet), done ones pruned.
func TestPruneFollowsTheSlots(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	const age = 10 * 24 * time.Hour
	opts := outbox.PruneOptions{OlderThan: 24 * time.Hour}
	rows(t, conn, 5, "done", age)
	rows(t, conn, 5, "pending", age)
	if res, err := outbox.Prune(ctx, conn, opts); err != nil || res.Deleted != 5 || res.Slots != 0 {
		t.Fatalf("without slots: %+v %v, want the 5 done rows pruned, the pending ones kept", res, err)
	}
	rows(t, conn, 5, "done", age)
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot('stopped', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	rows(t, conn, 3, "done", age)
	rows(t, conn, 4, "pending", age)

	dry := opts
	dry.DryRun = true
	res, err := outbox.Prune(ctx, conn, dry)
	if err != nil || res.Deleted != 10 || res.Kept != 7 || res.Behind != "stopped" {
		t.Fatalf("dry run: %+v %v, want 10 to delete (before the slot) and 7 kept behind slot stopped", res, err)
	}
	res, err = outbox.Prune(ctx, conn, opts)
	if err != nil || res.Deleted != 10 || res.Kept != 7 || res.Slots != 1 {
		t.Fatalf("pruned %+v %v, want the 10 rows from before the slot, 7 kept", res, err)
	}
	if got, want := countByStatus(t, conn), map[string]int{"done": 3, "pending": 4}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("left %v, want %v (written after the slot's position)", got, want)
	}
	advance(t, conn, "stopped")
	if res, err = outbox.Prune(ctx, conn, opts); err != nil || res.Deleted != 7 || res.Kept != 0 {
		t.Fatalf("after the slot confirmed them: %+v %v, want the 7 rows pruned", res, err)
	}
}

func TestPruneWithoutTable(t *testing.T) {
	conn, err := pgx.Connect(context.Background(), pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	_, err = outbox.Prune(context.Background(), conn, outbox.PruneOptions{OlderThan: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "outbox-relay migrate") {
		t.Fatalf("err = %v, want one that says to migrate", err)
	}
}

func TestPruneRejectsNoAge(t *testing.T) {
	_, conn := migratedDB(t)
	if _, err := outbox.Prune(context.Background(), conn, outbox.PruneOptions{}); err == nil {
		t.Fatal("Prune without OlderThan succeeded")
	}
	if err := (outbox.Retention{}).Run(context.Background(), conn); err == nil {
		t.Fatal("Retention without OlderThan succeeded")
	}
}

func TestRetentionPrunesOnInterval(t *testing.T) {
	dsn, conn := migratedDB(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows(t, conn, 20, "done", 48*time.Hour)
	results := make(chan outbox.PruneResult, 100)
	ctx, cancel := context.WithCancel(context.Background())
	r := outbox.Retention{PruneOptions: outbox.PruneOptions{OlderThan: 24 * time.Hour}, Every: 20 * time.Millisecond,
		OnPrune: func(res outbox.PruneResult, err error) {
			if err != nil {
				t.Errorf("prune: %v", err)
			}
			results <- res
		}}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, pool) }()
	waitDeleted := func(n int64) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case res := <-results:
				if res.Deleted == n {
					return
				}
			case <-deadline:
				t.Fatalf("no prune deleted %d rows within 10s", n)
			}
		}
	}
	waitDeleted(20)
	rows(t, conn, 5, "done", 48*time.Hour)
	waitDeleted(5)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
}

// Delete delivered events older than a week, a thousand rows per transaction.
func ExamplePrune() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDSN())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	_, _ = pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status,
		created_at, available_at, processed_at)
		SELECT 'order', g::text, 'order.created', '{}', 'done', now() - interval '9 days', now() - interval '9 days',
		       now() - interval '8 days'
		FROM generate_series(1, 2500) g`)

	res, err := outbox.Prune(ctx, pool, outbox.PruneOptions{OlderThan: 7 * 24 * time.Hour, BatchSize: 1000})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("deleted %d rows in %d batches\n", res.Deleted, res.Batches)
	// Output: deleted 2500 rows in 3 batches
}

// A row an endpoint still needs is kept past the retention: one an endpoint's backlog names
// (it is delivered from there), one an endpoint's lane (<pipeline>/<endpoint>) dead-lettered or
// parked, and one a replay --since not done covers. Once the backlog delivered it, the lane's
// replay forgot it and the replay is done, it is pruned like any other.
func TestPruneKeepsRowsAnEndpointStillNeeds(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	rows(t, conn, 10, "done", 10*24*time.Hour)
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO outbox_endpoint_backlog (pipeline, endpoint_id, lsn, idx, event_id)
		SELECT 'default', 'acme', '0/10'::pg_lsn + aggregate_id::int, 0, id FROM outbox_events WHERE aggregate_id::int <= 2`)
	exec(`INSERT INTO outbox_pipeline_events (pipeline, event_id, status)
		SELECT 'default/globex', id, CASE aggregate_id WHEN '3' THEN 'failed' ELSE 'parked' END
		FROM outbox_events WHERE aggregate_id IN ('3', '4')`)
	// Three rows created 20 days ago, in the range of a replay still running, and the range of
	// one done, which holds nothing.
	exec(`INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at, available_at, processed_at)
		SELECT 'invoice', g::text, 'invoice.sent', '{}', 'done', now() - interval '20 days', now() - interval '20 days',
		       now() - interval '19 days' FROM generate_series(1, 3) g`)
	exec(`INSERT INTO outbox_replays (pipeline, since, until, total, request_lsn, state)
		VALUES ('default/acme', now() - interval '21 days', now() - interval '15 days', 3, '0/0', 'running'),
		       ('default/globex', now() - interval '11 days', NULL, 10, '0/0', 'done')`)
	opts := outbox.PruneOptions{OlderThan: 24 * time.Hour}
	if res, err := outbox.Prune(ctx, conn, opts); err != nil || res.Deleted != 6 {
		t.Fatalf("pruned %d rows (%v), want 6 (13 done, 2 in a backlog, 2 a lane's dead letters, 3 in a running replay)", res.Deleted, err)
	}
	var kept []string
	r, _ := conn.Query(ctx, `SELECT aggregate_type || '/' || aggregate_id FROM outbox_events ORDER BY 1`)
	var id string
	if _, err := pgx.ForEachRow(r, []any{&id}, func() error { kept = append(kept, id); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := "invoice/1,invoice/2,invoice/3,order/1,order/2,order/3,order/4"; strings.Join(kept, ",") != want {
		t.Fatalf("kept %v, want %s", kept, want)
	}
	exec(`DELETE FROM outbox_endpoint_backlog`)
	exec(`DELETE FROM outbox_pipeline_events`)
	exec(`UPDATE outbox_replays SET state = 'done'`)
	if res, err := outbox.Prune(ctx, conn, opts); err != nil || res.Deleted != 7 {
		t.Fatalf("once nothing needs them pruned %d rows (%v), want 7", res.Deleted, err)
	}
}

// A schema older than the tables prune consults (migration 15's endpoint backlog) is refused
// with the fix, not with a missing relation.
func TestPruneOnAnOlderSchemaSaysToMigrate(t *testing.T) {
	dsn := pgtest.NewDB(t)
	if err := relaytest.ApplyUpSections(context.Background(), dsn, 14); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	_, err = outbox.Prune(context.Background(), conn, outbox.PruneOptions{OlderThan: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "table outbox_endpoint_backlog does not exist") ||
		!strings.Contains(err.Error(), "outbox-relay migrate") || strings.Contains(err.Error(), "table outbox_events") {
		t.Fatalf("err = %v, want one that names the missing table (not outbox_events, which is there) and says to migrate", err)
	}
}
