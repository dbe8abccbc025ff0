package relay

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// rangeEvents are what writeAcrossRange wrote: every event, and those of tenant t1 created in
// [since, until), renumbered from 1 per aggregate (a replay of the range starts each aggregate
// there).
type rangeEvents struct {
	all, t1InRange relaytest.Result
	since, until   time.Time
}

// writeAcrossRange commits aggregates x-0..x-2 of tenant t1 and y-0 of tenant t2, seq 1..6
// each, one transaction per event, and takes since (the database's clock) after seq 2 and until
// after seq 4: the range cuts through every aggregate.
func (e *env) writeAcrossRange() rangeEvents {
	e.t.Helper()
	ctx := context.Background()
	clock := func() time.Time {
		var at time.Time
		if err := e.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
			e.t.Fatal(err)
		}
		return at
	}
	var w rangeEvents
	for s := 1; s <= 6; s++ {
		for _, a := range []struct{ tenant, id string }{{"t1", "x-0"}, {"t1", "x-1"}, {"t1", "x-2"}, {"t2", "y-0"}} {
			id, err := outbox.Enqueue(ctx, e.pool, outbox.Event{AggregateType: "order", AggregateID: a.id, EventType: "order.changed",
				TenantID: a.tenant, Payload: map[string]int{"seq": s}})
			if err != nil {
				e.t.Fatal(err)
			}
			w.all.Committed = append(w.all.Committed, relaytest.Committed{ID: id.String(), Aggregate: "order/" + a.id, Seq: s})
			if a.tenant == "t1" && s >= 3 && s <= 4 {
				w.t1InRange.Committed = append(w.t1InRange.Committed, relaytest.Committed{ID: id.String(), Aggregate: "order/" + a.id, Seq: s - 2})
			}
		}
		switch s {
		case 2:
			w.since = clock()
		case 4:
			w.until = clock()
		}
	}
	return w
}

// replayRange requests a replay --since --until of lane (a pipeline, or P/ID for an endpoint),
// checks that it counts want events, and waits until the relay recorded it done.
func (e *env) replayRange(lane string, w rangeEvents, want int64) {
	e.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close(ctx)
	plan, err := control.RequestReplaySince(ctx, conn, control.SinceRequest{Pipeline: lane, Since: w.since, Until: w.until}, false)
	if err != nil {
		e.t.Fatal(err)
	}
	if plan.Events != want {
		e.t.Fatalf("the replay counts %d events, want %d (seq 3 and 4 of each aggregate)", plan.Events, want)
	}
	waitFor(e.t, time.Minute, "the replay done", func() bool {
		var state string
		_ = e.pool.QueryRow(ctx, `SELECT state FROM outbox_replays WHERE id = $1`, plan.ID).Scan(&state)
		return state == "done"
	})
}

func requireExactly(t *testing.T, who string, want relaytest.Result, ds []relaytest.Delivery) {
	t.Helper()
	if rep := relaytest.Check(want, ds); !rep.OK() || rep.Duplicates != 0 {
		t.Fatalf("%s: %s (lost %v, phantoms %v, order %v)", who, rep, first(rep.Lost), first(rep.Phantoms), first(rep.OrderViolations))
	}
}

// A replay --since --until to one endpoint re-sends exactly that endpoint's events created in
// [since, until): not those before since nor at or after until, not another tenant's it is not
// subscribed to; with their original ids, in order per aggregate; and nothing to the other
// endpoint.
func TestEndpointReplaySinceUntilResendsOnlyTheRange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := newPartner(t, "all", func(string, string, string) bool { return true })
	e.addPartner(all, endpoints.Endpoint{})
	e.start(endpointsConfig)
	w := e.writeAcrossRange()
	all.want = w.all
	waitPartners(t, all)
	waitFor(t, 30*time.Second, "the events marked done", func() bool { return e.notDone() == 0 })
	late := newPartner(t, "t1-late", func(tenant, _, _ string) bool { return tenant == "t1" })
	e.addPartner(late, endpoints.Endpoint{TenantID: "t1"})
	before := len(all.recv.Deliveries())
	e.replayRange("default/"+late.id, w, 8) // counted over the range: both tenants
	// Done once every row is in the endpoint's backlog, which then delivers them.
	waitFor(t, time.Minute, "the range delivered from the backlog", func() bool {
		return len(late.recv.Deliveries()) >= len(w.t1InRange.Committed) && e.backlogCount(late.id) == 0
	})
	requireExactly(t, "endpoint "+late.id, w.t1InRange, late.recv.Deliveries())
	if n := len(all.recv.Deliveries()); n != before {
		t.Fatalf("the other endpoint received %d events of a replay for %s", n-before, late.id)
	}
}

// The same range replayed to a pipeline's destination: exactly the events created in
// [since, until), again, in order per aggregate.
func TestReplaySinceUntilResendsOnlyTheRange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(nil)
	w := e.writeAcrossRange()
	requireOK(t, waitAll(t, e.recv, w.all, time.Minute))
	waitFor(t, 30*time.Second, "the events marked done", func() bool { return e.notDone() == 0 })
	before := len(e.recv.Deliveries())
	e.replayRange("default", w, 8)
	var inRange relaytest.Result
	for _, c := range w.all.Committed {
		if c.Seq >= 3 && c.Seq <= 4 {
			c.Seq -= 2
			inRange.Committed = append(inRange.Committed, c)
		}
	}
	requireExactly(t, "the replay", inRange, e.recv.Deliveries()[before:])
}
