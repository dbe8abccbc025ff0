package relay

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// retentionAge is the prune age of these tests: every delivered row is older than it at once.
const retentionAge = time.Millisecond

// prune runs one prune of rows older than retentionAge, as `--retention` does.
func (e *env) prune() outbox.PruneResult {
	e.t.Helper()
	res, err := outbox.Prune(context.Background(), e.pool, outbox.PruneOptions{OlderThan: retentionAge})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Logf("prune: %+v", res)
	return res
}

// waitConfirmedRows waits until every slot named (every logical slot of the database, if none
// is named) shows, in its catalog_xmin, that it confirmed the transactions that last wrote the
// rows of aggregate type typ (every row, if typ is empty). PostgreSQL advances catalog_xmin
// when a slot confirms past a running-transactions record, which it writes every 15 s under
// load and at checkpoints: each round asks for one.
func (e *env) waitConfirmedRows(typ string, slots ...string) {
	e.t.Helper()
	ctx := context.Background()
	var v int
	if err := e.pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		e.t.Fatal(err)
	}
	snapshot := "CHECKPOINT"
	if v >= 160000 {
		snapshot = "SELECT pg_log_standby_snapshot()"
	}
	waitFor(e.t, time.Minute, "slots confirmed the rows of "+typ, func() bool {
		if _, err := e.pool.Exec(ctx, snapshot); err != nil {
			e.t.Fatal(err)
		}
		var ok bool
		err := e.pool.QueryRow(ctx, `
			SELECT coalesce((SELECT min(age(xmin)) FROM outbox_events WHERE $1 = '' OR aggregate_type = $1), 2147483647) >
			       (SELECT max(age(catalog_xmin)) FROM pg_replication_slots
			        WHERE database = current_database() AND (coalesce(cardinality($2::text[]), 0) = 0 OR slot_name = ANY($2)))`,
			typ, slots).Scan(&ok)
		if err != nil {
			e.t.Fatal(err)
		}
		return ok
	})
}

// With several pipelines and no status owner (every pipeline filtered, and a shadow), the rows
// stay pending, yet once every pipeline's slot confirmed them they are pruned: those each
// pipeline delivered, those the shadow abandoned, and those no filter selects.
func TestPruneWithoutStatusOwner(t *testing.T) {
	t.Parallel()
	e := newPipelinesEnv(t)
	mirror := relaytest.NewReceiver(secret)
	t.Cleanup(mirror.Close)
	mirror.SetFail(func(*http.Request) int { return http.StatusServiceUnavailable })
	pipeline := func(name, filter, url string) Pipeline {
		return Pipeline{Name: name, Filter: filter, Slot: e.slot + "_" + name, Publication: "pub_" + e.slot + "_" + name,
			WebhookURL: url, Secrets: []string{secret}, RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond}
	}
	shadow := pipeline("mirror", "", mirror.URL)
	shadow.Shadow, shadow.MaxAttempts = true, 2
	pipelines := []Pipeline{
		pipeline("orders", "aggregate_type = 'order'", e.recv.URL),
		pipeline("invoices", "aggregate_type = 'invoice'", e.orders.URL),
		shadow,
	}
	if StatusOwner(pipelines) != -1 {
		t.Fatal("the pipelines of this test have a status owner")
	}
	e.startNoWait(func(c *Config) { c.Pipelines = pipelines })
	waitFor(t, 30*time.Second, "three slots", func() bool {
		return e.count(`SELECT count(*) FROM pg_replication_slots WHERE database = current_database()
			AND confirmed_flush_lsn IS NOT NULL`) == 3 // consistent: rows committed from now on are streamed
	})
	orders := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 4, Type: "order"})
	invoices := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 4, Type: "invoice"})
	others := e.produce(relaytest.Workload{Events: 50, Aggregates: 5, MaxTxSize: 4, Type: "payment"})
	total := len(orders.Committed) + len(invoices.Committed) + len(others.Committed)
	requireOK(t, waitAll(t, e.recv, orders, time.Minute))
	requireOK(t, waitAll(t, e.orders, invoices, time.Minute))
	waitFor(t, time.Minute, "the shadow abandoned every row", func() bool {
		return e.count(`SELECT count(*) FROM outbox_pipeline_events WHERE pipeline = 'mirror' AND status = 'abandoned'`) == total
	})
	if n := e.count(`SELECT count(*) FROM outbox_events WHERE status = 'pending'`); n != total {
		t.Fatalf("%d of %d rows pending: without a status owner no pipeline marks rows", n, total)
	}
	e.waitConfirmedRows("")
	if res := e.prune(); res.Deleted != int64(total) {
		t.Fatalf("pruned %d of %d rows every pipeline is done with", res.Deleted, total)
	}
	if n := e.count(`SELECT count(*) FROM outbox_events`); n != 0 {
		t.Fatalf("%d rows left", n)
	}
}

// A row the status owner delivered is kept while another pipeline has not confirmed it (its
// destination is down: it may yet dead-letter the row, and a replay needs the row then), also
// while that pipeline is not running, and while it holds the row dead-lettered or parked; rows
// every pipeline is done with are pruned meanwhile. After the replay, the rows go too.
func TestPruneKeepsWhatAPipelineStillNeeds(t *testing.T) {
	t.Parallel()
	e := newPipelinesEnv(t)
	attempts := 1000
	r := e.startBoth(func(c *Config) {
		e.pipelines(c)
		c.Pipelines[1].MaxAttempts = attempts
	})
	ordersSlot := e.slot + "_orders"
	invoices := e.produce(relaytest.Workload{Events: 60, Aggregates: 6, MaxTxSize: 3, Type: "invoice"})
	requireOK(t, waitAll(t, e.recv, invoices, time.Minute))
	e.waitConfirmedRows("invoice")

	e.orders.SetFail(func(*http.Request) int { return http.StatusServiceUnavailable })
	orders := e.produce(relaytest.Workload{Events: 40, Aggregates: 4, MaxTxSize: 2, Type: "order"})
	requireOK(t, waitAll(t, e.recv, merge(invoices, orders), time.Minute))
	waitFor(t, 30*time.Second, "rows marked done by the status owner", func() bool {
		return e.count(`SELECT count(*) FROM outbox_events WHERE status = 'done'`) == len(invoices.Committed)+len(orders.Committed)
	})
	e.waitConfirmedRows("order", e.slot+"_all")
	waitFor(t, 30*time.Second, "pipeline orders retrying", func() bool { return e.orders.Requests() > 10 })

	res := e.prune()
	if res.Deleted != int64(len(invoices.Committed)) {
		t.Fatalf("pruned %d rows, want the %d invoice rows every pipeline is done with", res.Deleted, len(invoices.Committed))
	}
	if n := e.count(`SELECT count(*) FROM outbox_events WHERE aggregate_type = 'order'`); n != len(orders.Committed) {
		t.Fatalf("%d of %d order rows left: pipeline orders has not confirmed them", n, len(orders.Committed))
	}
	if res.Kept != int64(len(orders.Committed)) || res.Behind != ordersSlot {
		t.Fatalf("prune reports %d rows kept behind slot %q, want %d behind %q", res.Kept, res.Behind, len(orders.Committed), ordersSlot)
	}

	// Not running: the slot stays where it was.
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if res := e.prune(); res.Deleted != 0 {
		t.Fatalf("pruned %d rows while pipeline orders was stopped before them", res.Deleted)
	}

	// Running again, it dead-letters them: the rows are there for it, and kept for its replay.
	attempts = 2
	e.startBoth(func(c *Config) {
		e.pipelines(c)
		c.Pipelines[1].MaxAttempts = attempts
	})
	waitFor(t, time.Minute, "pipeline orders dead-lettered or parked every order", func() bool {
		return e.count(`SELECT count(*) FROM outbox_pipeline_events WHERE pipeline = 'orders' AND status IN ('failed', 'parked')`) ==
			len(orders.Committed)
	})
	e.waitConfirmedRows("order")
	if res := e.prune(); res.Deleted != 0 {
		t.Fatalf("pruned %d rows pipeline orders holds for its replay", res.Deleted)
	}

	e.orders.SetFail(nil)
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := control.RequestReplay(context.Background(), conn, control.ReplaySelection{All: true, Pipeline: "orders"}, false); err != nil {
		t.Fatal(err)
	}
	requireOK(t, waitAll(t, e.orders, orders, time.Minute))
	waitFor(t, 30*time.Second, "the replay's records cleared", func() bool {
		return e.count(`SELECT count(*) FROM outbox_pipeline_events`) == 0
	})
	e.waitConfirmedRows("order")
	if res := e.prune(); res.Deleted != int64(len(orders.Committed)) {
		t.Fatalf("pruned %d rows after the replay, want the %d order rows", res.Deleted, len(orders.Committed))
	}
}
