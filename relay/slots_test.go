package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/inspect"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// exited waits for a relay to stop by itself and returns its error.
func (r *running) exited(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		close(r.done) // stop, at cleanup, then sees a closed channel
		return err
	case <-time.After(within):
		t.Fatalf("relay still running after %s", within)
	}
	return nil
}

// dropSlot terminates the walsender holding the slot and drops it, as an administrator would;
// the relay reconnects within milliseconds, so it tries until the drop wins the race.
func (e *env) dropSlot() {
	e.t.Helper()
	ctx := context.Background()
	waitFor(e.t, 30*time.Second, "slot dropped", func() bool {
		_, _ = e.pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot)
		_, err := e.pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, e.slot)
		return err == nil
	})
}

// Seen: a slot dropped while the relay ran, then a plain restart: the events committed in
// between were never delivered. Now the restart's new slot backfills them, in order.
func TestDroppedSlotRestartDeliversEverything(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.start(nil)
	res1 := e.produce(relaytest.Workload{Events: 200, Aggregates: 10, MaxTxSize: 5})
	requireOK(t, e.waitDelivered(res1, time.Minute))
	e.dropSlot()
	err := r.exited(t, time.Minute)
	wantErr(t, err, cdc.ErrSlotMissing, "restart: the new slot backfills")
	// Committed while no slot exists: only a backfill can deliver these.
	res2 := e.produce(relaytest.Workload{Events: 300, Aggregates: 10, MaxTxSize: 5, Type: "invoice"})
	e.start(nil) // what any supervisor does
	res3 := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 5, Type: "refund"})
	all := relaytest.Result{Committed: concat(res1, res2, res3)}
	requireOK(t, e.waitDelivered(all, time.Minute))
}

// Seen: DROP PUBLICATION while running gave "slot no longer exists" and a crash loop, since the
// slot decodes WAL from before the publication was created again. Now the relay names the
// cause, drops the slot it cannot use, and a plain restart delivers every committed row in order.
func TestDroppedPublicationRecoversOnRestart(t *testing.T) {
	t.Parallel()
	for _, recreate := range []bool{false, true} {
		t.Run(fmt.Sprintf("created again=%v", recreate), func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			r := e.start(nil)
			res1 := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 5})
			requireOK(t, e.waitDelivered(res1, time.Minute))
			pub := pgx.Identifier{"pub_" + e.slot}.Sanitize()
			if _, err := e.pool.Exec(ctx, `DROP PUBLICATION `+pub); err != nil {
				t.Fatal(err)
			}
			// Written while the publication is missing: the old slot fails on them, for good.
			res2 := e.produce(relaytest.Workload{Events: 300, Aggregates: 10, MaxTxSize: 5, Type: "invoice"})
			if recreate { // as an administrator (or a relay before this fix) would
				if _, err := e.pool.Exec(ctx, `CREATE PUBLICATION `+pub+` FOR TABLE outbox_events WITH (publish = 'insert')`); err != nil {
					t.Fatal(err)
				}
			}
			err := r.exited(t, time.Minute)
			wantErr(t, err, cdc.ErrPublicationMissing, "restart")
			res3 := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 5, Type: "refund"})
			e.start(nil)
			res4 := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 5, Type: "credit"})
			all := relaytest.Result{Committed: concat(res1, res2, res3, res4)}
			requireOK(t, e.waitDelivered(all, time.Minute))
		})
	}
}

// A publication dropped and created again by hand while no relay ran: the slot, older than the
// new publication, would decode the WAL written in between against the catalog of that time.
// PostgreSQL 15-17 fail on it for good; PostgreSQL 18 streams on without those rows, and
// nothing noticed. The relay now compares the publication with the one the slot was made for
// (outbox_slots.publication_oid) at start, and recreates the slot with a backfill: every row
// arrives, on every version.
func TestPublicationReplacedWhileStoppedRecreatesTheSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	r := e.start(nil)
	res1 := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 5})
	requireOK(t, e.waitDelivered(res1, time.Minute))
	r.stop(t)
	pub := pgx.Identifier{"pub_" + e.slot}.Sanitize()
	if _, err := e.pool.Exec(ctx, `DROP PUBLICATION `+pub); err != nil {
		t.Fatal(err)
	}
	res2 := e.produce(relaytest.Workload{Events: 200, Aggregates: 10, MaxTxSize: 5, Type: "invoice"})
	if _, err := e.pool.Exec(ctx, `CREATE PUBLICATION `+pub+` FOR TABLE outbox_events WITH (publish = 'insert')`); err != nil {
		t.Fatal(err)
	}
	res3 := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 5, Type: "refund"})
	e.start(nil)
	res4 := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 5, Type: "credit"})
	requireOK(t, e.waitDelivered(relaytest.Result{Committed: concat(res1, res2, res3, res4)}, time.Minute))
}

func concat(rs ...relaytest.Result) []relaytest.Committed {
	var out []relaytest.Committed
	for _, r := range rs {
		out = append(out, r.Committed...)
	}
	return out
}

// Seen: a table shadow.outbox_events added to the publication had its rows POSTed. Events come
// only from public.outbox_events.
func TestOtherSchemaOutboxTableIsIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, `CREATE SCHEMA shadow;
		CREATE TABLE shadow.outbox_events (LIKE public.outbox_events INCLUDING DEFAULTS)`)
	if err != nil {
		t.Fatal(err)
	}
	e.start(nil)
	if _, err := e.pool.Exec(ctx, `ALTER PUBLICATION `+pgx.Identifier{"pub_" + e.slot}.Sanitize()+
		` ADD TABLE shadow.outbox_events`); err != nil {
		t.Fatal(err)
	}
	var shadowIDs []string
	for i := 0; i < 3; i++ {
		var id string
		err := e.pool.QueryRow(ctx, `INSERT INTO shadow.outbox_events (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', 'shadow', 'order.changed', '{"seq": 1}') RETURNING id::text`).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		shadowIDs = append(shadowIDs, id)
	}
	// Positive control: public rows committed after the shadow rows arrive, so the shadow rows
	// were decoded (and dropped) before them.
	res := e.produce(relaytest.Workload{Events: 20, Aggregates: 2, MaxTxSize: 3})
	requireOK(t, e.waitDelivered(res, time.Minute))
	for _, d := range e.recv.Deliveries() {
		for _, id := range shadowIDs {
			if d.ID == id {
				t.Fatalf("row %s of shadow.outbox_events was delivered", id)
			}
		}
	}
}

// Seen: 2,480 rows older than a new slot pending, and status said healthy. Now it says why it
// is not; with the default backfill (the positive control) the same rows leave and it is healthy.
func TestStatusUnhealthyWhileRowsOlderThanTheSlotArePending(t *testing.T) {
	t.Parallel()
	for _, noBackfill := range []bool{true, false} {
		e := newEnv(t)
		w := &seqWriter{seq: map[string]int{}}
		w.write(t, e, 30, 3)
		e.start(func(c *Config) { c.NoBackfill = noBackfill })
		res := e.produce(relaytest.Workload{Events: 10, Aggregates: 2, MaxTxSize: 2, Type: "invoice"})
		if !noBackfill {
			res.Committed = append(res.Committed, w.done...)
		}
		requireOK(t, e.waitDelivered(res, time.Minute))
		var ok bool
		var why string
		waitFor(t, 30*time.Second, "status settles", func() bool {
			rep, err := inspect.Status(context.Background(), e.pool, "", e.slot, 5)
			if err != nil {
				t.Fatal(err)
			}
			ok, why = rep.Healthy()
			return rep.Slot.Active && (noBackfill || ok)
		})
		t.Logf("no-backfill=%v: healthy=%v: %s", noBackfill, ok, why)
		if noBackfill && (ok || !strings.Contains(why, "30 pending rows")) {
			t.Fatalf("30 rows older than the slot pending, status says healthy=%v: %s", ok, why)
		}
	}
}

// insertTx writes n events of one aggregate by plain SQL (default id) in one transaction.
func insertTx(t *testing.T, ctx context.Context, tx pgx.Tx, agg string, seqs []int) []relaytest.Committed {
	t.Helper()
	var out []relaytest.Committed
	for _, s := range seqs {
		var id string
		err := tx.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', $1, 'order.changed', jsonb_build_object('seq', $2::int)) RETURNING id::text`, agg, s).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, relaytest.Committed{ID: id, Aggregate: "order/" + agg, Seq: s})
	}
	return out
}

// Seen: one transaction inserting A1..A10 was backfilled A3 A6 A1 A8 ... (random ids broke
// the created_at tie). Now a backfill keeps insertion order within a transaction.
func TestBackfillKeepsInsertionOrderWithinATransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	committed := insertTx(t, ctx, tx, "a", []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var log relaytest.SyncBuffer
	e.start(func(c *Config) { c.Logger = zerolog.New(&log).Level(zerolog.WarnLevel) })
	requireOK(t, e.waitDelivered(relaytest.Result{Committed: committed}, time.Minute))
	// The shared test cluster runs without track_commit_timestamp: run says so, once.
	if n := strings.Count(log.String(), "commit order needs track_commit_timestamp = on"); n != 1 {
		t.Fatalf("the backfill's order note appears %d times in the log:\n%s", n, log.String())
	}
}

// Seen: overlapping transactions were backfilled in start order. With track_commit_timestamp
// on, two transactions on one aggregate that commit in the opposite order of their start are
// backfilled in commit order.
func TestBackfillKeepsCommitOrderAcrossTransactions(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	ctx := context.Background()
	c, err := pgtest.Start(ctx, pgtest.Options{Settings: map[string]string{"track_commit_timestamp": "on"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	dsn := c.DSN("postgres")
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := relaytest.Pool(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	first, err := pool.Begin(ctx) // starts and inserts first, commits last
	if err != nil {
		t.Fatal(err)
	}
	late := insertTx(t, ctx, first, "a", []int{4, 5, 6})
	second, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	early := insertTx(t, ctx, second, "a", []int{1, 2, 3})
	if err := second.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	recv := relaytest.NewReceiver(secret)
	defer recv.Close()
	cfg := Config{DSN: dsn, WebhookURL: recv.URL, Secrets: []string{secret}, Slot: "s", Publication: "pub",
		RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(testLogLevel)}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, cfg) }()
	res := relaytest.Result{Committed: append(early, late...)}
	deadline := time.Now().Add(time.Minute)
	for len(relaytest.Check(res, recv.Deliveries()).Lost) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	requireOK(t, relaytest.Check(res, recv.Deliveries()))
}

// The publication dropped while no relay runs, with writes meanwhile: the next start creates the
// publication, sees the slot is older than it (it cannot decode the WAL written in between), and
// recreates the slot with a backfill, so everything is delivered in order.
func TestPublicationDroppedWhileStoppedRecoversOnStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.start(nil)
	res1 := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 5})
	requireOK(t, e.waitDelivered(res1, time.Minute))
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(context.Background(), `DROP PUBLICATION `+pgx.Identifier{"pub_" + e.slot}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	res2 := e.produce(relaytest.Workload{Events: 200, Aggregates: 10, MaxTxSize: 5, Type: "invoice"})
	e.start(nil)
	res3 := e.produce(relaytest.Workload{Events: 100, Aggregates: 10, MaxTxSize: 5, Type: "refund"})
	requireOK(t, e.waitDelivered(relaytest.Result{Committed: concat(res1, res2, res3)}, time.Minute))
}

// `run --recreate-slot`, the one command a failed slot drop names, recreates a slot nobody
// streams from (not only an invalidated one) and backfills what is pending; a slot a relay
// streams from is left alone.
func TestRecreateSlotReplacesAnInactiveSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	pub := "pub_" + e.slot
	if _, err := cdc.Setup(ctx, e.dsn, e.slot, pub, cdc.SetupOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &seqWriter{seq: map[string]int{}}
	w.write(t, e, 25, 5)
	res, err := cdc.Setup(ctx, e.dsn, e.slot, pub, cdc.SetupOptions{RecreateSlot: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.SlotRecreated || res.Backfill != 25 {
		t.Fatalf("--recreate-slot on an inactive slot: %+v, want it recreated with 25 rows backfilled", res)
	}
	e.start(nil)
	requireOK(t, e.waitDelivered(relaytest.Result{Committed: w.done}, time.Minute))
	res, err = cdc.Setup(ctx, e.dsn, e.slot, pub, cdc.SetupOptions{RecreateSlot: true})
	if err != nil || res.SlotRecreated {
		t.Fatalf("--recreate-slot on a streaming slot: %+v, %v; want it left alone", res, err)
	}
}
