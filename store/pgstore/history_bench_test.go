package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/store/pgstore"
)

// The lookup a relay makes after a restart or a takeover (publisher.Resume.History), once per
// batch of 1,000 events the stream sends again, and once per page of a backlog it reads: here
// on a delivery log of 1,000,000 deliveries (50,000 events to each of 20 endpoints, in rows of
// 1,000, one flush each), asking about 1,000 consecutive events all 20 endpoints have. Nothing is
// added to the delivery path: the log is written as before.
func BenchmarkDeliveredTo(b *testing.B) {
	ctx := context.Background()
	dsn := pgtest.NewDB(b)
	if _, err := migrations.Up(ctx, dsn); err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	const endpoints, events, perRow, batch = 20, 50_000, 1000, 1000
	ids := make([]string, events)
	for i := range ids {
		ids[i] = fmt.Sprintf("0193a5b2-7c4e-7d1a-9f00-%012d", i)
	}
	at := time.Now()
	for ep := range endpoints {
		for lo := 0; lo < events; lo += perRow {
			var e state.DeliveryEntries
			for i := lo; i < lo+perRow; i++ {
				e.Add("p", fmt.Sprintf("ep%02d", ep), ids[i], 1, at, 200, time.Millisecond, "")
			}
			if err := state.InsertDeliveries(ctx, pool, "", &e); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE outbox_deliveries`); err != nil {
		b.Fatal(err)
	}
	if testing.Verbose() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off`); err != nil {
			b.Fatal(err)
		}
		rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) SELECT DISTINCT endpoint_id FROM outbox_deliveries
			WHERE event_ids @> ARRAY[$2::uuid] AND pipeline = $1 AND (cardinality($3::text[]) = 0 OR endpoint_id = ANY($3::text[]))
			ORDER BY 1`, "p", ids[events/2], []string{})
		if err != nil {
			b.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			_ = rows.Scan(&line)
			plan = append(plan, line)
		}
		rows.Close()
		b.Logf("plan of one event's lookup:\n%s", strings.Join(plan, "\n"))
	}
	dlog := pgstore.NewDeliveryLog(pool, pgstore.DeliveryLogConfig{})
	b.ResetTimer()
	for i := range b.N {
		lo := (i * batch) % (events - batch)
		got, err := dlog.DeliveredTo(ctx, "p", ids[lo:lo+batch])
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != batch || len(got[ids[lo]]) != endpoints {
			b.Fatalf("found %d events (the first at %d endpoints), want %d at %d", len(got), len(got[ids[lo]]), batch, endpoints)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "µs/event")
}
