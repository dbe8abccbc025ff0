package relay

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Issue (review): a dead letter that could not be stored because the relay was stopping was
// still acknowledged, so the slot confirmed past a row that stayed pending, and no replay would
// ever select it. The store here fails for real: the table is locked while the relay stops.
// The event must stay unconfirmed, and the next run must deliver it.
func TestStopDoesNotConfirmAnUnstoredDeadLetter(t *testing.T) {
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
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'
			AND query LIKE 'UPDATE outbox_events SET status = ''failed''%'`).Scan(&n)
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
