package inbox_test

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/inbox/inboxmigrate"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// seedAges inserts rows into table: done ones received the given number of days ago, and one
// 'received' row ten days old, which a prune must keep.
func seedAges(t *testing.T, pool *pgxpool.Pool, table string, doneDaysAgo ...int) {
	t.Helper()
	ctx := context.Background()
	for _, d := range doneDaysAgo {
		_, err := pool.Exec(ctx, `INSERT INTO `+table+` (id, received_at, processed_at, handler_status, payload)
			VALUES (gen_random_uuid(), now() - make_interval(days => $1), now() - make_interval(days => $1), 'done', '{}')`, d)
		must(t, err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO `+table+` (id, received_at, handler_status, payload)
		VALUES (gen_random_uuid(), now() - interval '10 days', 'received', '{}')`)
	must(t, err)
}

// ages lists the rows left in table as "<status> <days old>", oldest first.
func ages(t *testing.T, pool *pgxpool.Pool, table string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT handler_status || ' ' || extract(day FROM now() - received_at)::int
		FROM `+table+` ORDER BY received_at, handler_status`)
	must(t, err)
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	must(t, err)
	return list
}

// Prune deletes the done rows older than OlderThan, in batches, on a pgx pool and on a
// *sql.DB, and keeps recent rows and rows of another status.
func TestPrune(t *testing.T) {
	for _, name := range []string{"pgx", "database/sql"} {
		t.Run(name, func(t *testing.T) {
			e := newDriverEnv(t)
			seedAges(t, e.pool, "inbox_events", 30, 20, 10, 9, 8, 1, 0)
			opts := inbox.PruneOptions{OlderThan: 7 * 24 * time.Hour, BatchSize: 2}
			var res inbox.PruneResult
			var err error
			if name == "pgx" {
				res, err = inbox.Prune(context.Background(), e.pool, opts)
			} else {
				db, oerr := sql.Open("pgx", e.dsn)
				must(t, oerr)
				defer db.Close()
				res, err = inbox.Prune(context.Background(), db, opts)
			}
			must(t, err)
			if res.Deleted != 5 || res.Batches != 3 {
				t.Fatalf("deleted %d in %d batches, want 5 in 3 (batches of 2)", res.Deleted, res.Batches)
			}
			if got, want := ages(t, e.pool, "inbox_events"), []string{"received 10", "done 1", "done 0"}; !slices.Equal(got, want) {
				t.Fatalf("left %v, want %v", got, want)
			}
			if age := time.Since(res.Cutoff); age < 7*24*time.Hour-time.Minute || age > 7*24*time.Hour+time.Minute {
				t.Fatalf("cutoff %s is %s ago, want 7 days", res.Cutoff, age)
			}
			res, err = inbox.Prune(context.Background(), e.pool, opts)
			if err != nil || res.Deleted != 0 || res.Batches != 1 {
				t.Fatalf("second prune: %+v, %v; want nothing deleted", res, err)
			}
		})
	}
}

// A retention inside the sender's retry horizon is refused, naming the horizon, unless the
// caller states a shorter horizon; the refused prune deletes nothing.
func TestPruneRefusesInsideTheRetryHorizon(t *testing.T) {
	e := newDriverEnv(t)
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, `INSERT INTO inbox_events (id, received_at, handler_status, payload)
		VALUES (gen_random_uuid(), now() - interval '3 hours', 'done', '{}')`)
	must(t, err)
	_, err = inbox.Prune(ctx, e.pool, inbox.PruneOptions{OlderThan: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "retry horizon (48h0m0s)") || !strings.Contains(err.Error(), "RetryHorizon") {
		t.Fatalf("OlderThan 1h: %v; want a refusal naming the horizon and RetryHorizon", err)
	}
	if n := e.rows(t); n != 1 {
		t.Fatalf("a refused prune left %d rows, want 1", n)
	}
	res, err := inbox.Prune(ctx, e.pool, inbox.PruneOptions{OlderThan: time.Hour, RetryHorizon: 30 * time.Minute})
	if err != nil || res.Deleted != 1 {
		t.Fatalf("OlderThan 1h with a stated horizon of 30m: %+v, %v; want the 3-hour-old row deleted", res, err)
	}
	for _, bad := range []inbox.PruneOptions{{}, {OlderThan: -time.Hour}, {OlderThan: 72 * time.Hour, RetryHorizon: -1}} {
		if _, err := inbox.Prune(ctx, e.pool, bad); err == nil {
			t.Errorf("Prune(%+v) accepted", bad)
		}
	}
	if _, err := inbox.New(e.pool, []string{"s"}, recordEffect, inbox.Config{Retention: time.Hour}); err == nil ||
		!strings.Contains(err.Error(), "Config.Retention") {
		t.Fatalf("New with Retention 1h: %v; want a refusal naming Config.Retention", err)
	}
	conn, err := pgx.Connect(ctx, e.dsn)
	must(t, err)
	defer conn.Close(ctx)
	if _, err := inbox.NewProcessor(conn, recordEffect, inbox.Config{Retention: 72 * time.Hour}); err == nil ||
		!strings.Contains(err.Error(), "needs a pool") {
		t.Fatalf("Retention on a single *pgx.Conn: %v; want a refusal", err)
	}
	if _, err := inbox.NewProcessor(conn, recordEffect, inbox.Config{}); err != nil {
		t.Fatalf("a single *pgx.Conn without Retention: %v", err)
	}
}

// Config.Retention prunes in the background from the start, and Close stops it.
func TestRetentionPrunesInTheBackground(t *testing.T) {
	e := newDriverEnv(t)
	seedAges(t, e.pool, "inbox_events", 30, 10, 1)
	var logs relaytest.SyncBuffer
	p, err := inbox.NewProcessor(e.pool, recordEffect,
		inbox.Config{Retention: 72 * time.Hour, Logger: zerolog.New(&logs)})
	must(t, err)
	relaytest.WaitFor(t, 30*time.Second, "the background prune", func() bool { return e.rows(t) == 2 })
	if got, want := ages(t, e.pool, "inbox_events"), []string{"received 10", "done 1"}; !slices.Equal(got, want) {
		t.Fatalf("left %v, want %v", got, want)
	}
	relaytest.WaitFor(t, 10*time.Second, "the prune's log line", func() bool {
		return strings.Contains(logs.String(), `"deleted":2`)
	})
	must(t, p.Close())
	must(t, p.Close()) // idempotent
}

// The inbox resolves its table by Config.Schema, as the relay does: with search_path public,
// Schema "app" migrates, delivers and prunes app.inbox_events and leaves a public one alone;
// without a Schema, the connection's search_path decides.
func TestSchemaApp(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dsn)
	must(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE SCHEMA app; CREATE TABLE effects (event_id uuid NOT NULL)`)
	must(t, err)
	app := inbox.Config{Schema: "app"}
	if _, err := inboxmigrate.Migrate(ctx, pool, app); err != nil {
		t.Fatal(err)
	}
	if _, err := inboxmigrate.Migrate(ctx, pool, inbox.Config{}); err != nil { // a decoy in public
		t.Fatal(err)
	}
	p, err := inbox.NewProcessor(pool, recordEffect, app)
	must(t, err)
	h, body := relayMessage("0190e3c4-8d4b-7c3a-9f1e-2b5d6a7c8e9f")
	if r, err := p.Process(ctx, h, body); err != nil || r.Processed != 1 {
		t.Fatalf("Process in schema app: %+v, %v", r, err)
	}
	count := func(table string) int {
		var n int
		must(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n))
		return n
	}
	if a, pub := count("app.inbox_events"), count("public.inbox_events"); a != 1 || pub != 0 {
		t.Fatalf("app.inbox_events %d rows, public.inbox_events %d; want 1 and 0", a, pub)
	}

	// No Schema: a pool whose search_path is app finds app's table.
	cfg, err := pgxpool.ParseConfig(dsn)
	must(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = "app"
	appPool, err := pgxpool.NewWithConfig(ctx, cfg)
	must(t, err)
	defer appPool.Close()
	p2, err := inbox.NewProcessor(appPool, func(context.Context, pgx.Tx, inbox.Event) error { return nil }, inbox.Config{})
	must(t, err)
	if r, err := p2.Process(ctx, h, body); err != nil || r.Duplicates != 1 {
		t.Fatalf("Process through search_path app: %+v, %v; want the duplicate recorded in app", r, err)
	}

	seedAges(t, pool, "app.inbox_events", 10)
	seedAges(t, pool, "public.inbox_events", 10)
	res, err := inbox.Prune(ctx, pool, inbox.PruneOptions{OlderThan: 72 * time.Hour, Schema: "app"})
	if err != nil || res.Deleted != 1 {
		t.Fatalf("prune of app: %+v, %v", res, err)
	}
	if got := ages(t, pool, "public.inbox_events"); !slices.Equal(got, []string{"done 10", "received 10"}) {
		t.Fatalf("public.inbox_events after pruning app: %v", got)
	}
}
