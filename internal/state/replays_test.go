package state

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// sinceDB is a migrated database on a cluster of its own (this package's other tests need
// none), with rows rows delivered 1 ms apart from base on, and its pool.
// sincePage is the page size the relay reads a replay in (publisher.sincePage).
const sincePage = 4096

func sinceDB(t *testing.T, rows int) (*pgxpool.Pool, time.Time) {
	t.Helper()
	ctx := context.Background()
	c, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	name, err := c.CreateDatabase(ctx, "since_page")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(ctx, c.DSN(name)); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, c.DSN(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	base := time.Date(2026, 3, 3, 10, 0, 0, 0, time.UTC)
	// Every 10th row was delivered before sequences were recorded (no event_sequence); every
	// 7th is still pending, and not replayed.
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at, event_sequence)
		SELECT 'order', (g % 50)::text, 'order.created', jsonb_build_object('seq', g),
		       CASE WHEN g % 7 = 0 THEN 'pending' ELSE 'done' END, $2::timestamptz + g * interval '1 millisecond',
		       CASE WHEN g % 10 <> 0 AND g % 7 <> 0 THEN upper(lpad(to_hex(g * 256), 16, '0')) || '-00000000' END
		FROM generate_series(1, $1) g`, rows, base); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) outbox_events`); err != nil {
		t.Fatal(err)
	}
	return pool, base
}

// A replay --since page is a range scan of outbox_events_replay_order, in replay order with no
// sort and no scan of the table, whether the range starts at the beginning or in the middle
// (ranges of many pages: for what fits in about one page, PostgreSQL may rather sort it); and
// the pages, each resumed at the last cursor, return every row of the range exactly once, in
// replay order.
func TestSincePageWalksTheIndexOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	const rows = 100_000
	pool, base := sinceDB(t, rows)
	ctx := context.Background()
	for _, since := range []time.Time{base, base.Add(rows / 2 * time.Millisecond)} {
		args := sincePageArgs(ReplayRange{Since: since}, ReplayCursor{}, sincePage)
		var plan []string
		r, err := pool.Query(ctx, "EXPLAIN "+schema.SQL("", sincePageSQL), args...)
		if err != nil {
			t.Fatal(err)
		}
		if plan, err = pgx.CollectRows(r, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		text := strings.Join(plan, "\n")
		t.Logf("since %s:\n%s", since.Format(time.RFC3339Nano), text)
		if !strings.Contains(text, "Index Scan using outbox_events_replay_order") || strings.Contains(text, "Sort") ||
			strings.Contains(text, "Seq Scan") {
			t.Fatalf("the page query is not one range scan of outbox_events_replay_order:\n%s", text)
		}
	}

	st := ReplayRange{Since: base.Add(rows / 2 * time.Millisecond)}
	r, err := pool.Query(ctx, `SELECT id::text FROM outbox_events
		WHERE created_at >= $1 AND status IN ('done', 'failed', 'parked') ORDER BY `+sinceOrder, st.Since)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var after ReplayCursor
	var got []string
	for pages := 0; ; pages++ {
		evs, err := ReplayPage(ctx, pool, "", st, after, sincePage)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			if pages != (len(want)+4095)/4096 {
				t.Fatalf("%d pages for %d rows in pages of 4096", pages, len(want))
			}
			break
		}
		for _, ev := range evs {
			got = append(got, ev.ID)
		}
		after = evs[len(evs)-1].Cursor
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("the pages returned %d rows, want the %d of the range once each, in replay order", len(got), len(want))
	}
}

// A replay --since pages the schema's outbox_events, by name, whatever the search_path: with
// Schema "app" the pages hold app's rows only, though public (first on the search_path) has
// the relay's tables too; without a schema, public's (the positive control).
func TestSincePageInANamedSchema(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	ctx := context.Background()
	c, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	name, err := c.CreateDatabase(ctx, "since_schema")
	if err != nil {
		t.Fatal(err)
	}
	dsn := c.DSN(name)
	for _, s := range []string{"app", "public"} {
		if _, err := migrations.UpWith(ctx, dsn, migrations.Options{Schema: s}); err != nil {
			t.Fatal(err)
		}
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	base := time.Date(2026, 3, 3, 10, 0, 0, 0, time.UTC)
	want := map[string][]string{}
	for s, n := range map[string]int{"app": 3, "public": 5} {
		rows, err := pool.Query(ctx, `INSERT INTO `+pgx.Identifier{s, "outbox_events"}.Sanitize()+`
			(aggregate_type, aggregate_id, event_type, payload, status, created_at, event_sequence)
			SELECT 'order', g::text, 'order.created', '{}', 'done', $2::timestamptz + g * interval '1 millisecond',
			       upper(lpad(to_hex(g * 256), 16, '0')) || '-00000000'
			FROM generate_series(1, $1) g RETURNING id::text`, n, base)
		if err != nil {
			t.Fatal(err)
		}
		if want[s], err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ schema, rows string }{{"app", "app"}, {"", "public"}} {
		evs, err := ReplayPage(ctx, pool, tc.schema, ReplayRange{Since: base}, ReplayCursor{}, sincePage)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range evs {
			got = append(got, ev.ID)
		}
		if strings.Join(got, ",") != strings.Join(want[tc.rows], ",") {
			t.Errorf("Schema %q: the page holds %v, want %s's rows %v", tc.schema, got, tc.rows, want[tc.rows])
		}
	}
}
