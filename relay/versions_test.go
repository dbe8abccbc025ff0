package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// requireVersion skips a test that the shared cluster's server is too old for, saying why,
// except when PG_VERSION asks for a version that has the feature: then a mismatch fails, so
// the CI step that runs these tests on 16 or 17 cannot pass by skipping them.
func requireVersion(t *testing.T, minNum int, feature string) {
	t.Helper()
	var num int
	if err := pgxConnRow(t, "SELECT current_setting('server_version_num')::int", &num); err != nil {
		t.Fatal(err)
	}
	if num >= minNum {
		return
	}
	if v, err := strconv.Atoi(os.Getenv("PG_VERSION")); err == nil && v*10000 >= minNum {
		t.Fatalf("PG_VERSION=%d but the server is %d: %s cannot be tested", v, num, feature)
	}
	t.Skipf("%s needs PostgreSQL %d+ and this server is %d; .ci/run runs this test with PG_VERSION=17",
		feature, minNum/10000, num)
}

func pgxConnRow(t *testing.T, sql string, dst any) error {
	pool, err := pgxpool.New(context.Background(), pgtest.Shared(t).DSN("postgres"))
	if err != nil {
		return err
	}
	defer pool.Close()
	return pool.QueryRow(context.Background(), sql).Scan(dst)
}

// primaryWithStandby starts a primary (its own cluster, with settings) holding a migrated
// database, and a hot standby of it with standbySettings. Both are removed when the test ends.
func primaryWithStandby(t *testing.T, settings, standbySettings map[string]string) (primary, standby *pgtest.Cluster, db string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, err := pgtest.Start(ctx, pgtest.Options{Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Close() })
	if db, err = primary.CreateDatabase(ctx, "versions"); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(ctx, primary.DSN(db)); err != nil {
		t.Fatal(err)
	}
	standby, err = primary.StartStandby(ctx, pgtest.StandbyOptions{Slot: "standby1", DB: db, Settings: standbySettings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Close() })
	return primary, standby, db
}

func clusterPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := relaytest.Pool(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// fromTable is the ground truth of what is committed: every outbox row of the database, with
// the per-aggregate sequence the writers put in the payload.
func fromTable(t *testing.T, pool *pgxpool.Pool) relaytest.Result {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT id::text, aggregate_type || '/' || aggregate_id, (payload->>'seq')::int FROM outbox_events`)
	if err != nil {
		t.Fatal(err)
	}
	var res relaytest.Result
	var c relaytest.Committed
	for rows.Next() {
		if err := rows.Scan(&c.ID, &c.Aggregate, &c.Seq); err != nil {
			t.Fatal(err)
		}
		res.Committed = append(res.Committed, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return res
}

// loadWriters write one- to three-event transactions over their own aggregates until ctx ends
// or a write fails (the server died): each aggregate's rows then carry seq 1..n without gaps,
// whatever became of the last, unacknowledged commit.
func loadWriters(ctx context.Context, pool *pgxpool.Pool, writers, aggsPerWriter int, pause time.Duration) (wait func() int) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			seq := map[string]int{}
			for ctx.Err() == nil {
				agg := fmt.Sprintf("w%d-%d", w, rand.IntN(aggsPerWriter))
				n, err := writeAgg(ctx, pool, agg, seq[agg], 1+rand.IntN(3))
				if err != nil {
					return
				}
				seq[agg] += n
				mu.Lock()
				total += n
				mu.Unlock()
				time.Sleep(pause)
			}
		}(w)
	}
	return func() int { wg.Wait(); return total }
}

func writeAgg(ctx context.Context, pool *pgxpool.Pool, agg string, last, n int) (int, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	for i := 1; i <= n; i++ {
		if _, err := outbox.Enqueue(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: agg,
			EventType: "order.changed", Payload: map[string]int{"seq": last + i}}); err != nil {
			return 0, err
		}
	}
	return n, tx.Commit(ctx)
}

// continueWriting writes n more events on the aggregates the table already has, after the
// highest seq each has there.
func continueWriting(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT aggregate_id, max((payload->>'seq')::int) FROM outbox_events GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int{}
	var agg string
	var seq int
	for rows.Next() {
		if err := rows.Scan(&agg, &seq); err != nil {
			t.Fatal(err)
		}
		last[agg] = seq
	}
	if len(last) == 0 {
		t.Fatal("no aggregates to continue")
	}
	aggs := make([]string, 0, len(last))
	for a := range last {
		aggs = append(aggs, a)
	}
	for written := 0; written < n; {
		a := aggs[rand.IntN(len(aggs))]
		k, err := writeAgg(ctx, pool, a, last[a], 1+rand.IntN(3))
		if err != nil {
			t.Fatal(err)
		}
		last[a] += k
		written += k
	}
}

// waitAllDelivered waits until every row of the table was delivered, then checks the
// guarantees against the table.
func waitAllDelivered(t *testing.T, pool *pgxpool.Pool, recv *relaytest.Receiver, within time.Duration) relaytest.Report {
	t.Helper()
	truth := fromTable(t, pool)
	deadline := time.Now().Add(within)
	for {
		rep := relaytest.Check(truth, recv.Deliveries())
		if len(rep.Lost) == 0 || time.Now().After(deadline) {
			return rep
		}
		time.Sleep(100 * time.Millisecond)
	}
}
