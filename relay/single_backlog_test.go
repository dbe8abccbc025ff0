package relay

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// A pipeline of one webhook with backlog, breaker and delivery log (--backlog, --breaker,
// --delivery-log) spills when its webhook is down: the slot confirms past events nobody received
// (they are in the backlog), the failed attempts are in the delivery log, and once the webhook
// answers again every event arrives, in order per aggregate, and the backlog empties.
func TestOneDestinationSpillsToItsBacklogWhileDown(t *testing.T) {
	e := newEnv(t)
	var down atomic.Bool
	down.Store(true)
	e.recv.SetFail(func(*http.Request) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	r := e.start(func(c *Config) {
		c.Backlog, c.Breaker, c.DeliveryLog = true, true, true
		c.SpillAfter, c.RetryMin, c.RetryMax = 300*time.Millisecond, 10*time.Millisecond, 100*time.Millisecond
	})
	defer func() { _ = r.stop(t) }()
	res := e.produce(relaytest.Workload{Events: 500, Aggregates: 10, MaxTxSize: 5})
	_, end := e.slotLSNs()
	waitFor(t, 30*time.Second, "the slot confirmed past the workload while the webhook was down", func() bool {
		c, _ := e.slotLSNs()
		return c >= end
	})
	if n := len(e.recv.Deliveries()); n != 0 {
		t.Fatalf("%d events accepted while the webhook answered 503", n)
	}
	var spilled, failed int
	ctx := context.Background()
	_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_endpoint_backlog WHERE endpoint_id = ''`).Scan(&spilled)
	// The delivery log is written in batches off the delivery path: its rows may come a moment
	// after the slot confirmed.
	waitFor(t, 30*time.Second, "the failed attempts in the delivery log", func() bool {
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_delivery_attempts WHERE endpoint_id = ''`).Scan(&failed)
		return failed > 0
	})
	if spilled != 500 || failed == 0 {
		t.Fatalf("backlog holds %d events (want 500), delivery log %d failed attempts", spilled, failed)
	}
	down.Store(false)
	requireOK(t, e.waitDelivered(res, time.Minute))
	waitFor(t, 30*time.Second, "the backlog emptied", func() bool {
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_endpoint_backlog`).Scan(&spilled)
		return spilled == 0
	})
}
