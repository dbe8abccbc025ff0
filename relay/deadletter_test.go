package relay

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/controlmsg"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

const poisonAgg = "order/7"

// rejectPoison makes the receiver fail every request of aggregate order/7 while on is set.
func (e *env) rejectPoison(on *atomic.Bool) {
	e.recv.SetFail(func(req *http.Request) int {
		if on.Load() && req.Header.Get("X-Aggregate-Type")+"/"+req.Header.Get("X-Aggregate-Id") == poisonAgg {
			return http.StatusBadGateway
		}
		return 0
	})
}

func deadLetterConfig(c *Config) {
	c.MaxAttempts = 3
	c.RetryMin = 5 * time.Millisecond
	c.RetryMax = 20 * time.Millisecond
}

func (e *env) statusCounts(agg string) map[string]int {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT status, count(*)::int FROM outbox_events
		WHERE aggregate_type || '/' || aggregate_id = $1 GROUP BY status`, agg)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		_ = rows.Scan(&s, &n)
		out[s] = n
	}
	return out
}

func (e *env) replay(sel control.ReplaySelection) []control.ReplayPlan {
	e.t.Helper()
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	plans, err := control.RequestReplay(context.Background(), conn, sel, false)
	if err != nil {
		e.t.Fatal(err)
	}
	return plans
}

func poisonCount(res relaytest.Result) (n int) {
	for _, c := range res.Committed {
		if c.Aggregate == poisonAgg {
			n++
		}
	}
	return n
}

// waitParked waits until the poison aggregate's first event is failed and the rest parked.
func (e *env) waitParked(res relaytest.Result) {
	e.t.Helper()
	n := poisonCount(res)
	if n < 2 {
		e.t.Fatalf("workload has %d events of %s; the test needs at least 2", n, poisonAgg)
	}
	var c map[string]int
	deadline := time.Now().Add(30 * time.Second)
	for {
		c = e.statusCounts(poisonAgg)
		if c["failed"] == 1 && c["parked"] == n-1 {
			return
		}
		if time.Now().After(deadline) {
			rows, _ := e.pool.Query(context.Background(), `SELECT payload::text, status, coalesce(event_sequence,'') FROM outbox_events
				WHERE aggregate_type || '/' || aggregate_id = $1 ORDER BY (payload->>'seq')::int`, poisonAgg)
			for rows.Next() {
				var p, st, sq string
				_ = rows.Scan(&p, &st, &sq)
				e.t.Log(p, st, sq)
			}
			e.t.Fatalf("poison aggregate not dead-lettered and parked: %d events, statuses %v", n, c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *env) others(res relaytest.Result) relaytest.Result {
	var out relaytest.Result
	for _, c := range res.Committed {
		if c.Aggregate != poisonAgg {
			out.Committed = append(out.Committed, c)
		}
	}
	return out
}

// A receiver rejects one aggregate forever: it is dead-lettered and parked, nothing of it is
// accepted, every other aggregate is delivered and the slot moves past the workload. After
// the receiver recovers, a replay delivers the aggregate in order and every row ends done.
func TestDeadLetterParksAndReplayDeliversInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var rejecting atomic.Bool
	rejecting.Store(true)
	e.rejectPoison(&rejecting)
	r := e.start(deadLetterConfig)
	res := e.produce(relaytest.Workload{Events: 2000, Aggregates: 20, MaxTxSize: 10, Rollback: 0.05})
	end := e.currentLSN()
	if poisonCount(res) < 2 {
		t.Fatal("workload has too few poison events")
	}
	e.waitParked(res)
	requireOK(t, e.waitDelivered(e.others(res), time.Minute))
	for _, d := range e.recv.Deliveries() {
		if d.Aggregate == poisonAgg {
			t.Fatalf("event %s of the parked aggregate was accepted before the replay", d.ID)
		}
	}
	var lastErr string
	_ = e.pool.QueryRow(context.Background(), `SELECT coalesce(last_error, '') FROM outbox_events WHERE status = 'failed'`).Scan(&lastErr)
	if lastErr != "HTTP 502" {
		t.Fatalf("last_error = %q, want HTTP 502", lastErr)
	}
	waitFor(t, 10*time.Second, "slot confirmed past the workload although one aggregate is parked", func() bool {
		c, _ := e.slotLSNs()
		return c >= end
	})
	if got := r.metric(t, "outbox_relay_events_dead_lettered_total"); got != 1 {
		t.Fatalf("events_dead_lettered_total = %v", got)
	}
	if got := r.metric(t, "outbox_relay_parked_aggregates"); got != 1 {
		t.Fatalf("parked_aggregates = %v", got)
	}

	rejecting.Store(false)
	plans := e.replay(control.ReplaySelection{All: true})
	if len(plans) != 1 || len(plans[0].Events) != poisonCount(res) {
		t.Fatalf("replay plan %+v", plans)
	}
	requireOK(t, e.waitDelivered(res, time.Minute))
	var notDone, parked int
	waitFor(t, 10*time.Second, "every row done and nothing parked", func() bool {
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events WHERE status <> 'done'`).Scan(&notDone)
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_parked_aggregates`).Scan(&parked)
		if notDone+parked > 0 {
			t.Logf("%d rows not done, %d aggregates parked", notDone, parked)
		}
		return notDone == 0 && parked == 0
	})
}

// New events of the parked aggregate keep being committed while the replay runs: order holds.
func TestReplayKeepsOrderWhileNewEventsArrive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var rejecting atomic.Bool
	rejecting.Store(true)
	e.rejectPoison(&rejecting)
	e.start(deadLetterConfig)
	res := e.produce(relaytest.Workload{Events: 500, Aggregates: 10, MaxTxSize: 5})
	e.waitParked(res)
	rejecting.Store(false)

	next := poisonCount(res)
	stop := make(chan struct{})
	written := make(chan []relaytest.Committed, 1)
	go func() {
		var more []relaytest.Committed
		for i := 0; ; i++ {
			select {
			case <-stop:
				written <- more
				return
			default:
			}
			next++
			id, err := outbox.Enqueue(context.Background(), e.pool, outbox.Event{AggregateType: "order", AggregateID: "7",
				EventType: "order.changed", Payload: map[string]int{"seq": next}})
			if err != nil {
				t.Error(err)
				written <- more
				return
			}
			more = append(more, relaytest.Committed{ID: id.String(), Aggregate: poisonAgg, Seq: next})
			time.Sleep(2 * time.Millisecond)
		}
	}()
	time.Sleep(50 * time.Millisecond)
	e.replay(control.ReplaySelection{Aggregates: []controlmsg.Aggregate{{Type: "order", ID: "7"}}})
	time.Sleep(300 * time.Millisecond)
	close(stop)
	res.Committed = append(res.Committed, <-written...)
	requireOK(t, e.waitDelivered(res, time.Minute))
}

// A restart while an aggregate is parked: it stays parked, and later events wait for the replay.
func TestParkedAggregateStaysParkedAcrossRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var rejecting atomic.Bool
	rejecting.Store(true)
	e.rejectPoison(&rejecting)
	first := e.start(deadLetterConfig)
	res := e.produce(relaytest.Workload{Events: 300, Aggregates: 10, MaxTxSize: 5})
	e.waitParked(res)
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}
	rejecting.Store(false) // the endpoint is fine now, but only a replay may release the aggregate
	second := e.start(deadLetterConfig)
	n := poisonCount(res)
	id, err := outbox.Enqueue(context.Background(), e.pool, outbox.Event{AggregateType: "order", AggregateID: "7",
		EventType: "order.changed", Payload: map[string]int{"seq": n + 1}})
	if err != nil {
		t.Fatal(err)
	}
	res.Committed = append(res.Committed, relaytest.Committed{ID: id.String(), Aggregate: poisonAgg, Seq: n + 1})
	waitFor(t, 10*time.Second, "new event parked after the restart", func() bool {
		return e.statusCounts(poisonAgg)["parked"] == n
	})
	if e.recv.Has(id.String()) {
		t.Fatal("an event of a parked aggregate was delivered after a restart")
	}
	if got := second.metric(t, "outbox_relay_parked_aggregates"); got != 1 {
		t.Fatalf("parked_aggregates after restart = %v", got)
	}
	e.replay(control.ReplaySelection{EventID: id.String()})
	requireOK(t, e.waitDelivered(res, time.Minute))
}

func TestReplayWithNothingParked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	_, err = control.RequestReplay(context.Background(), conn, control.ReplaySelection{All: true}, false)
	if !errors.Is(err, control.ErrNothingToReplay) {
		t.Fatalf("err = %v", err)
	}
}
