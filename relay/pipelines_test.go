package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// pipelinesEnv is e with two pipelines: "all" (no filter) to e.recv, and "orders" (filter on
// event_type) to its own receiver.
type pipelinesEnv struct {
	*env
	orders *relaytest.Receiver
}

func newPipelinesEnv(t *testing.T) *pipelinesEnv {
	e := newEnv(t)
	orders := relaytest.NewReceiver(secret)
	t.Cleanup(orders.Close)
	return &pipelinesEnv{env: e, orders: orders}
}

func (e *pipelinesEnv) pipelines(cfg *Config) {
	cfg.Pipelines = []Pipeline{
		{Name: "all", Slot: e.slot + "_all", Publication: "pub_" + e.slot + "_all", WebhookURL: e.recv.URL,
			Secrets: []string{secret}, RetryMin: 10 * time.Millisecond, RetryMax: 200 * time.Millisecond},
		{Name: "orders", Filter: "event_type LIKE 'order%'", Slot: e.slot + "_orders", Publication: "pub_" + e.slot + "_orders",
			WebhookURL: e.orders.URL, Secrets: []string{secret}, RetryMin: 10 * time.Millisecond, RetryMax: 200 * time.Millisecond},
	}
	*cfg = flagFieldsCleared(*cfg)
}

// startBoth starts a relay and waits for both pipelines' slots.
func (e *pipelinesEnv) startBoth(mutate func(*Config)) *running {
	e.t.Helper()
	r := e.startNoWait(mutate)
	waitFor(e.t, 30*time.Second, "both slots created", func() bool {
		var n int
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = ANY($1)
			AND confirmed_flush_lsn IS NOT NULL`, []string{e.slot + "_all", e.slot + "_orders"}).Scan(&n)
		return n == 2
	})
	return r
}

// confirmed returns the slot's confirmed_flush_lsn as a number.
func (e *pipelinesEnv) confirmed(slot string) int64 {
	e.t.Helper()
	var c int64
	if err := e.pool.QueryRow(context.Background(), `SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&c); err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *pipelinesEnv) walNow() int64 {
	e.t.Helper()
	var n int64
	if err := e.pool.QueryRow(context.Background(), `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func merge(rs ...relaytest.Result) relaytest.Result {
	var out relaytest.Result
	for _, r := range rs {
		out.Committed = append(out.Committed, r.Committed...)
		out.RolledBack = append(out.RolledBack, r.RolledBack...)
	}
	return out
}

// waitAll waits until every event of res reached recv at least once.
func waitAll(t *testing.T, recv *relaytest.Receiver, res relaytest.Result, within time.Duration) relaytest.Report {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		rep := relaytest.Check(res, recv.Deliveries())
		if len(rep.Lost) == 0 || time.Now().After(deadline) {
			return rep
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Two pipelines over one outbox, one filtered on event_type: the filtered destination gets
// exactly its events (an invoice event reaching it is a phantom). Its receiver is blacked out for
// 15 s: meanwhile the other pipeline keeps delivering what is committed, and confirms its slot
// past it, while the blacked-out pipeline's slot holds the WAL. Afterwards both have everything,
// in order per aggregate.
func TestTwoPipelinesFilteredAndIndependent(t *testing.T) {
	t.Parallel()
	e := newPipelinesEnv(t)
	e.startBoth(e.pipelines)
	orders1 := e.produce(relaytest.Workload{Events: 300, Aggregates: 20, MaxTxSize: 5, Rollback: 0.05, Type: "order"})
	invoices1 := e.produce(relaytest.Workload{Events: 300, Aggregates: 20, MaxTxSize: 5, Rollback: 0.05, Type: "invoice"})
	requireOK(t, waitAll(t, e.recv, merge(orders1, invoices1), time.Minute))
	requireOK(t, waitAll(t, e.orders, orders1, time.Minute))

	// Blackout of the orders destination.
	blackoutEnd := time.Now().Add(15 * time.Second)
	e.orders.SetFail(func(*http.Request) int { return http.StatusServiceUnavailable })
	start := time.Now()
	var orders2, invoices2 relaytest.Result
	for i := 0; i < 5; i++ {
		// A new aggregate type per batch, so each batch's per-aggregate sequence starts afresh.
		orders2 = merge(orders2, e.produce(relaytest.Workload{Events: 40, Aggregates: 20, MaxTxSize: 5, Type: fmt.Sprint("order_", i)}))
		invoices2 = merge(invoices2, e.produce(relaytest.Workload{Events: 40, Aggregates: 20, MaxTxSize: 5, Type: fmt.Sprint("invoice_", i)}))
		time.Sleep(500 * time.Millisecond) // spread the writes over the blackout
	}
	written := e.walNow()
	// The healthy pipeline delivers everything committed during the blackout, and confirms its
	// slot past it, before the blackout ends.
	rep := waitAll(t, e.recv, merge(orders1, invoices1, orders2, invoices2), time.Until(blackoutEnd))
	requireOK(t, rep)
	waitFor(t, time.Until(blackoutEnd), "the healthy pipeline's slot confirmed past the blackout's writes", func() bool {
		return e.confirmed(e.slot+"_all") >= written
	})
	if time.Now().After(blackoutEnd) {
		t.Fatal("the healthy pipeline caught up only after the blackout")
	}
	during := 0
	for _, d := range e.recv.Deliveries() {
		if d.At.After(start) && d.At.Before(blackoutEnd) {
			during++
		}
	}
	if during == 0 {
		t.Fatal("no delivery of the healthy pipeline during the blackout")
	}
	// The blacked-out pipeline's slot holds the WAL of what it has not delivered.
	if held := e.confirmed(e.slot + "_orders"); held >= written {
		t.Fatalf("the blacked-out pipeline's slot confirmed %d, past the undelivered writes (%d)", held, written)
	}
	for _, c := range orders2.Committed {
		if e.orders.Has(c.ID) {
			t.Fatalf("event %s reached the blacked-out receiver", c.ID)
		}
	}
	time.Sleep(time.Until(blackoutEnd))
	e.orders.SetFail(nil)
	t.Logf("healthy deliveries during the blackout: %d", during)

	requireOK(t, waitAll(t, e.orders, merge(orders1, orders2), 2*time.Minute))
	requireOK(t, waitAll(t, e.recv, merge(orders1, invoices1, orders2, invoices2), time.Minute))
	waitFor(t, 30*time.Second, "the recovered pipeline's slot confirmed past the blackout's writes", func() bool {
		return e.confirmed(e.slot+"_orders") >= written
	})
}

// A filter PostgreSQL refuses stops the start with its reason, naming the pipeline, before any
// slot or publication exists; the same pipelines with a valid filter start.
func TestRefusedFilterCreatesNothing(t *testing.T) {
	t.Parallel()
	e := newPipelinesEnv(t)
	cfg := e.config()
	e.pipelines(&cfg)
	cfg.Pipelines[1].Filter = "no_such_column = 1"
	err := refused(t, cfg)
	if !errors.Is(err, cdc.ErrFilter) || !strings.Contains(err.Error(), `"orders"`) || !strings.Contains(err.Error(), "no_such_column") {
		t.Fatalf("error %q does not name the pipeline and PostgreSQL's reason", err)
	}
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1)
		+ (SELECT count(*) FROM pg_publication WHERE pubname LIKE $2)`, e.slot+"%", "pub_"+e.slot+"%").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("a refused filter left %d slots or publications behind", n)
	}
	// Positive control, and a changed filter: the publication is altered at start.
	r := e.startBoth(e.pipelines)
	waitFor(t, 30*time.Second, "orders publication filtered", func() bool {
		var f string
		_ = e.pool.QueryRow(context.Background(), `SELECT coalesce(pg_get_expr(pr.prqual, pr.prrelid), '')
			FROM pg_publication p JOIN pg_publication_rel pr ON pr.prpubid = p.oid WHERE p.pubname = $1`,
			"pub_"+e.slot+"_orders").Scan(&f)
		return strings.Contains(f, "order%")
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	e.startBoth(func(c *Config) {
		e.pipelines(c)
		c.Pipelines[1].Filter = "aggregate_type = 'invoice'"
	})
	waitFor(t, 30*time.Second, "orders publication filter changed", func() bool {
		var f string
		_ = e.pool.QueryRow(context.Background(), `SELECT coalesce(pg_get_expr(pr.prqual, pr.prrelid), '')
			FROM pg_publication p JOIN pg_publication_rel pr ON pr.prpubid = p.oid WHERE p.pubname = $1`,
			"pub_"+e.slot+"_orders").Scan(&f)
		return strings.Contains(f, "invoice")
	})
}

func (e *pipelinesEnv) count(q string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// A destination that refuses everything parks its aggregates in its own pipeline only: the
// other pipeline delivers the same rows, and, as the status owner, marks them done. A replay
// that names the pipeline re-sends them to it, in order, and unparks them.
func TestPoisonParksInItsPipelineOnly(t *testing.T) {
	t.Parallel()
	e := newPipelinesEnv(t)
	e.orders.SetFail(func(*http.Request) int { return http.StatusBadRequest })
	e.startBoth(func(c *Config) {
		e.pipelines(c)
		c.Pipelines[1].MaxAttempts = 2
	})
	orders := e.produce(relaytest.Workload{Events: 60, Aggregates: 5, MaxTxSize: 3, Type: "order"})
	requireOK(t, waitAll(t, e.recv, orders, time.Minute))
	waitFor(t, time.Minute, "every orders aggregate parked in pipeline orders", func() bool {
		return e.count(`SELECT count(*) FROM outbox_parked_aggregates WHERE pipeline = 'orders' AND own_state`) == 5
	})
	if n := e.count(`SELECT count(*) FROM outbox_parked_aggregates WHERE pipeline <> 'orders'`); n != 0 {
		t.Fatalf("%d aggregates parked in another pipeline", n)
	}
	waitFor(t, 30*time.Second, "rows marked done by the status owner", func() bool {
		return e.count(`SELECT count(*) FROM outbox_events WHERE status = 'done'`) == len(orders.Committed)
	})
	if n := e.count(`SELECT count(*) FROM outbox_pipeline_events WHERE pipeline = 'orders' AND status IN ('failed', 'parked')`); n != len(orders.Committed) {
		t.Fatalf("%d events recorded failed or parked for pipeline orders, want %d", n, len(orders.Committed))
	}
	e.orders.SetFail(nil)
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	plans, err := control.RequestReplay(context.Background(), conn, control.ReplaySelection{All: true, Pipeline: "orders"}, false)
	if err != nil || len(plans) != 5 {
		t.Fatalf("replay: %d plans, %v", len(plans), err)
	}
	requireOK(t, waitAll(t, e.orders, orders, time.Minute))
	waitFor(t, 30*time.Second, "orders unparked and its records cleared", func() bool {
		return e.count(`SELECT count(*) FROM outbox_parked_aggregates`)+
			e.count(`SELECT count(*) FROM outbox_pipeline_events`) == 0
	})
}

// A shadow pipeline whose destination is down gives up after its attempts: the events are
// recorded as abandoned, nothing is parked, and its slot confirms past them (no WAL pinned).
func TestShadowAbandonsAndNeverPins(t *testing.T) {
	t.Parallel()
	e := newPipelinesEnv(t)
	e.orders.SetFail(func(*http.Request) int { return http.StatusServiceUnavailable })
	e.startBoth(func(c *Config) {
		e.pipelines(c)
		c.Pipelines[1].Shadow = true
		c.Pipelines[1].MaxAttempts = 2
	})
	orders := e.produce(relaytest.Workload{Events: 30, Aggregates: 5, MaxTxSize: 3, Type: "order"})
	written := e.walNow()
	requireOK(t, waitAll(t, e.recv, orders, time.Minute))
	waitFor(t, time.Minute, "the shadow's slot confirmed past its failed events", func() bool {
		return e.confirmed(e.slot+"_orders") >= written
	})
	// The record of an abandoned event is best effort and comes after its settle (a shadow never
	// holds the slot for its own bookkeeping): it is written a moment later, not before the slot
	// moves.
	waitFor(t, time.Minute, "every event recorded abandoned", func() bool {
		return e.count(`SELECT count(*) FROM outbox_pipeline_events WHERE pipeline = 'orders' AND status = 'abandoned'`) ==
			len(orders.Committed)
	})
	if n := e.count(`SELECT count(*) FROM outbox_parked_aggregates`); n != 0 {
		t.Fatalf("a shadow parked %d aggregates", n)
	}
	if e.orders.Requests() < int64(2*len(orders.Committed)) {
		t.Fatalf("%d requests to the shadow, want at least 2 attempts per event", e.orders.Requests())
	}
}

// With the same aggregates parked in two pipelines, a replay naming one re-sends to that one
// only; the other stays parked until its own replay.
func TestReplayReachesOnlyItsPipeline(t *testing.T) {
	t.Parallel()
	e := newPipelinesEnv(t)
	refuse := func(*http.Request) int { return http.StatusBadRequest }
	e.recv.SetFail(refuse)
	e.orders.SetFail(refuse)
	e.startBoth(func(c *Config) {
		e.pipelines(c)
		c.Pipelines[0].MaxAttempts = 2
		c.Pipelines[1].MaxAttempts = 2
	})
	orders := e.produce(relaytest.Workload{Events: 20, Aggregates: 4, MaxTxSize: 2, Type: "order"})
	waitFor(t, time.Minute, "the aggregates parked in both pipelines", func() bool {
		return e.count(`SELECT count(*) FROM outbox_parked_aggregates WHERE pipeline = 'all'`) == 4 &&
			e.count(`SELECT count(*) FROM outbox_parked_aggregates WHERE pipeline = 'orders'`) == 4
	})
	e.recv.SetFail(nil)
	e.orders.SetFail(nil)
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := control.RequestReplay(context.Background(), conn, control.ReplaySelection{All: true}, true); !errors.Is(err, control.ErrPipelineNeeded) {
		t.Fatalf("a replay naming no pipeline with two parked: %v, want ErrPipelineNeeded", err)
	}
	if _, err := control.RequestReplay(context.Background(), conn, control.ReplaySelection{All: true, Pipeline: "orders"}, false); err != nil {
		t.Fatal(err)
	}
	requireOK(t, waitAll(t, e.orders, orders, time.Minute))
	waitFor(t, 30*time.Second, "orders unparked", func() bool {
		return e.count(`SELECT count(*) FROM outbox_parked_aggregates WHERE pipeline = 'orders'`) == 0
	})
	// The replay was in the stream of both slots, before this marker: once pipeline all has
	// delivered the marker, it has passed the replay request too.
	marker := e.produce(relaytest.Workload{Events: 1, Aggregates: 1, MaxTxSize: 1, Type: "marker"})
	requireOK(t, waitAll(t, e.recv, marker, time.Minute))
	if n := e.count(`SELECT count(*) FROM outbox_parked_aggregates WHERE pipeline = 'all'`); n != 4 {
		t.Fatalf("%d aggregates still parked in pipeline all, want 4: the replay named orders", n)
	}
	for _, c := range orders.Committed {
		if e.recv.Has(c.ID) {
			t.Fatalf("event %s was re-sent to pipeline all", c.ID)
		}
	}
	// Positive control: its own replay re-sends them.
	if _, err := control.RequestReplay(context.Background(), conn, control.ReplaySelection{All: true, Pipeline: "all"}, false); err != nil {
		t.Fatal(err)
	}
	requireOK(t, waitAll(t, e.recv, merge(orders, marker), time.Minute))
}
