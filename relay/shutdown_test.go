package relay

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// Issue (review): a dead letter that could not be stored because the relay was stopping was
// still acknowledged, so the slot confirmed past a row that stayed pending, and no replay would
// ever select it. The store here fails for real: the table is locked while the relay stops.
// The event must stay unconfirmed, and the next run must deliver it.
func TestStopDoesNotConfirmAnUnstoredDeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var rejecting atomic.Bool
	var attempts atomic.Int32
	rejecting.Store(true)
	e.recv.SetFail(func(req *http.Request) int {
		if req.Header.Get("X-Aggregate-Type")+"/"+req.Header.Get("X-Aggregate-Id") == poisonAgg && rejecting.Load() {
			attempts.Add(1)
			return http.StatusBadGateway
		}
		return 0
	})
	r := e.start(func(c *Config) {
		c.MaxAttempts, c.RetryMin, c.RetryMax, c.ShutdownTimeout = 3, time.Second, time.Second, time.Second
	})
	ctx := context.Background()
	var id string
	if err := e.pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '7', 'Created', '{"seq": 1}') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	after := e.currentLSN()
	waitFor(t, 30*time.Second, "second attempt", func() bool { return attempts.Load() >= 2 })

	// Lock the table before the last attempt, so its dead-letter write waits.
	lock, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx)
	tx, err := lock.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE outbox_events IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var status string
	if err := tx.QueryRow(ctx, `SELECT status FROM outbox_events WHERE id = $1`, id).Scan(&status); err != nil || status != "pending" {
		t.Fatalf("row is %q (%v) before the last attempt; the test needs it pending", status, err)
	}
	waitFor(t, 30*time.Second, "dead-letter write waiting on the lock", func() bool {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()
			AND query LIKE 'UPDATE "public"."outbox_events" SET status = ''failed''%'`).Scan(&n)
		return n > 0
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if confirmed, _ := e.slotLSNs(); confirmed >= after {
		t.Fatalf("slot confirmed %d, past the event committed before %d whose dead letter was never stored", confirmed, after)
	}
	rejecting.Store(false)
	e.start(nil)
	waitFor(t, 30*time.Second, "the event delivered by the next run", func() bool { return e.recv.Has(id) })
}

// A receiver that never answers: on stop, Run waits ShutdownTimeout for the delivery in flight,
// cancels it and returns (long before the request timeout), and the undelivered event is not
// confirmed, so the next run delivers it. An event delivered before shows confirmation works.
func TestShutdownTimeoutCancelsAHungDeliveryWithoutConfirmingIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const shutdownTimeout = 2 * time.Second
	r := e.start(func(c *Config) {
		c.RequestTimeout = 10 * time.Minute
		c.ShutdownTimeout = shutdownTimeout
		c.StatusInterval = 200 * time.Millisecond
	})
	first := e.produce(relaytest.Workload{Events: 1, Aggregates: 1, MaxTxSize: 1})
	requireOK(t, e.waitDelivered(first, 30*time.Second))
	before := e.currentLSN()
	waitFor(t, 30*time.Second, "the delivered event confirmed", func() bool { c, _ := e.slotLSNs(); return c >= before })

	e.recv.Hang()
	t.Cleanup(e.recv.Unhang) // a failing run must not leave the receiver's Close waiting
	requests := e.recv.Requests()
	var id string
	if err := e.pool.QueryRow(context.Background(), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', 'hung', 'Created', '{"seq": 1}') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the delivery in flight", func() bool { return e.recv.Requests() > requests })
	start := time.Now()
	if err := r.stop(t); err != nil { // r.stop fails the test if Run takes 30s
		t.Fatalf("Run returned %v after the shutdown timeout", err)
	}
	if took := time.Since(start); took < shutdownTimeout {
		t.Fatalf("Run returned %s after the stop, before the %s shutdown timeout let the delivery finish", took, shutdownTimeout)
	}
	// The slot still holds the event: peek at what it would send from its confirmed position.
	ctx := context.Background()
	waitFor(t, 10*time.Second, "slot released", func() bool {
		var active bool
		_ = e.pool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&active)
		return !active
	})
	var held int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2) WHERE position(convert_to($3, 'UTF8') IN data) > 0`,
		e.slot, "pub_"+e.slot, id).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held == 0 {
		confirmed, _ := e.slotLSNs()
		t.Fatalf("slot confirmed %d, past the undelivered event (written after %d)", confirmed, before)
	}
	if e.recv.Has(id) {
		t.Fatal("the hung request was recorded as delivered; the test proves nothing")
	}
	e.recv.Unhang()
	e.start(nil)
	waitFor(t, 30*time.Second, "the event delivered by the next run", func() bool { return e.recv.Has(id) })
}
