package relay

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// A lane writes its parks one at a time, in order: what is parked of an aggregate is always the
// start of its events, as a replay delivers it ahead of the rest. Here an endpoint that spilled
// and parked aggregate x-0 reads x-0's seq 2 from its backlog and parks it, but that write
// waits on a row lock held by another session; seq 3 is read next. Written side by side (the
// simulation's seed 7237), seq 3's park lands while seq 2's waits, and a relay killed then
// leaves x-0 parked without seq 2: the replay sends seq 3, then seq 2 from the backlog. Here
// seq 3 must not be parked while seq 2 is not; after the kill, a new relay and a replay deliver
// the aggregate in order (the positive control: nothing was lost).
func TestParksOfAnAggregateAreWrittenInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	picky := newPartner(t, "picky", func(string, string, string) bool { return true })
	e.addPartner(picky, endpoints.Endpoint{})
	var reject atomic.Bool
	reject.Store(true)
	picky.recv.SetFail(func(*http.Request) int {
		if reject.Load() {
			return http.StatusUnprocessableEntity
		}
		return 0
	})
	var logs relaytest.SyncBuffer
	cmd := e.startEndpointsProcess(io.MultiWriter(testWriter{t}, &logs), "--max-attempts", "2", "--retry-min", "3s",
		"--retry-max", "3s", "--spill-after", "300ms")
	e.waitSlot()
	enqueue := func(q outbox.Querier, seq int) string {
		t.Helper()
		id, err := outbox.Enqueue(ctx, q, outbox.Event{AggregateType: "order", AggregateID: "x-0", EventType: "order.created",
			Payload: map[string]int{"seq": seq}})
		if err != nil {
			t.Fatal(err)
		}
		picky.want.Committed = append(picky.want.Committed, relaytest.Committed{ID: id.String(), Aggregate: "order/x-0", Seq: seq})
		return id.String()
	}
	parked := func(id string) bool {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_pipeline_events WHERE pipeline = 'default/picky'
			AND event_id = $1 AND status IN ('failed', 'parked')`, id).Scan(&n)
		return n == 1
	}

	// Seq 1 fails and waits for its retry (at least 2.4s: longer than spill_after and the second
	// between spill checks), spills, and is dead-lettered from the backlog: x-0 is parked and the
	// lane stays spilled (it never delivered anything).
	first := enqueue(e.pool, 1)
	waitFor(t, 30*time.Second, "the endpoint spilled", func() bool { return strings.Contains(logs.String(), "endpoint spills to its backlog") })
	waitFor(t, 30*time.Second, "seq 1 dead-lettered", func() bool { return parked(first) })

	// Seq 2 is committed with its park already blocked: another session holds the key of its
	// row in outbox_pipeline_events.
	blocker, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(ctx) }()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := enqueue(tx, 2)
	if _, err := blocker.Exec(ctx, `INSERT INTO outbox_pipeline_events (pipeline, event_id, status) VALUES ('default/picky', $1, 'parked')`,
		second); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	const waiting = `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
		AND query LIKE '%outbox_pipeline_events%' AND pid <> pg_backend_pid()`
	waitFor(t, 30*time.Second, "the park of seq 2 waiting for the lock", func() bool {
		var pid int
		return e.pool.QueryRow(ctx, waiting).Scan(&pid) == nil
	})
	third := enqueue(e.pool, 3)
	waitFor(t, 30*time.Second, "seq 3 in the backlog", func() bool {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_endpoint_backlog WHERE endpoint_id = 'picky' AND event_id = $1`, third).Scan(&n)
		return n == 1
	})
	time.Sleep(2 * time.Second) // forty turns of the backlog loop: seq 3 is read and parked, or waits for seq 2's park
	if parked(third) {
		t.Fatal("seq 3 of x-0 is parked while the park of seq 2 waits: a relay dying now leaves a hole that its replay sends out of order")
	}

	// The relay dies with the park of seq 2 under way; its statement dies with it.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if _, err := e.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM (`+waiting+`) w`); err != nil {
		t.Fatal(err)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if parked(second) {
		t.Fatal("seq 2 was parked after the relay died: its park statement outlived it, the setup is void")
	}

	reject.Store(false)
	r := e.start(func(c *Config) { endpointsConfig(c); c.MaxAttempts = 2; c.SpillAfter = 300 * time.Millisecond })
	defer func() { _ = r.stop(t) }()
	e.replay(control.ReplaySelection{All: true, Pipeline: "default/picky"})
	waitPartners(t, picky)
}
