package relay

import (
	"context"
	"testing"
	"time"
)

// A relay with endpoints prunes the delivery log in the background. At its start, entries
// older than the retention (zero: the documented 7 days) go from both tables and every
// endpoint, and younger ones stay. The old attempts are three chunks, and the wait is shorter
// than the minute between passes, so one pass must delete every chunk.
func TestDeliveryLogPrunedInTheBackground(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	now := time.Now()
	old, young := now.Add(-8*24*time.Hour), now.Add(-6*24*time.Hour)
	oldAttempts := 2*deliveryLogPruneChunk + 100 // three chunks for endpoint a
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO outbox_delivery_attempts (pipeline, endpoint_id, event_id, attempt, at, status_code, latency_ms, error)
		SELECT 'default', ep, gen_random_uuid(), 1, at - g * interval '1 second', 500, 3, 'HTTP 500'
		FROM (VALUES ('a', $1::timestamptz, $3::int), ('a', $2, 3), ('b', $1, 2), ('b', $2, 4)) v(ep, at, n),
		     generate_series(1, n) g`, old, young, oldAttempts); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO outbox_deliveries (pipeline, endpoint_id, first_at, last_at, event_ids, delivered_at, attempts, latency_ms)
		SELECT 'default', ep, at, at, ARRAY[gen_random_uuid()], ARRAY[at], ARRAY[1], ARRAY[2]
		FROM (VALUES ('a', $1::timestamptz), ('a', $2), ('b', $1), ('c', $1), ('c', $2)) v(ep, at)`, old, young); err != nil {
		t.Fatal(err)
	}
	count := func(q string) int {
		var n int
		if err := e.pool.QueryRow(ctx, q, now.Add(-7*24*time.Hour)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const (
		oldAttemptsQ   = `SELECT count(*) FROM outbox_delivery_attempts WHERE at < $1`
		youngAttemptsQ = `SELECT count(*) FROM outbox_delivery_attempts WHERE at >= $1`
		oldDeliveriesQ = `SELECT count(*) FROM outbox_deliveries WHERE last_at < $1`
		youngDeliverQ  = `SELECT count(*) FROM outbox_deliveries WHERE last_at >= $1`
	)
	if n := count(oldAttemptsQ); n != oldAttempts+2 {
		t.Fatalf("set-up: %d old attempts, want %d", n, oldAttempts+2)
	}

	r := e.start(func(cfg *Config) { endpointsConfig(cfg) }) // DeliveryLogRetention zero: 7 days
	waitFor(t, 30*time.Second, "the delivery log's entries older than 7 days pruned", func() bool {
		return count(oldAttemptsQ) == 0 && count(oldDeliveriesQ) == 0
	})
	if a, d := count(youngAttemptsQ), count(youngDeliverQ); a != 7 || d != 2 {
		t.Fatalf("after the prune %d attempts and %d delivery rows younger than 7 days, want 7 and 2", a, d)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
