package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// writer commits one transaction of 1-3 events over 100 aggregates of its own every 5 ms,
// until it has written at least min events and stop was called.
type writer struct {
	written atomic.Int64
	stopped atomic.Bool
	mu      sync.Mutex
	res     relaytest.Result
	done    chan struct{}
}

func (e *env) steadyWrites(prefix string, minEvents int) *writer {
	w := &writer{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		ctx := context.Background()
		seq := map[string]int{}
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for w.written.Load() < int64(minEvents) || !w.stopped.Load() {
			<-t.C
			evs, err := e.writeTx(ctx, prefix, seq)
			if err != nil {
				e.t.Errorf("write: %v", err)
				return
			}
			w.mu.Lock()
			w.res.Committed = append(w.res.Committed, evs...)
			w.mu.Unlock()
			w.written.Add(int64(len(evs)))
		}
	}()
	return w
}

// wait stops the writer (once it has written its minimum) and returns what it committed.
func (w *writer) wait() relaytest.Result {
	w.stopped.Store(true)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.res
}

func (e *env) writeTx(ctx context.Context, prefix string, seq map[string]int) ([]relaytest.Committed, error) {
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.Background())
	var evs []relaytest.Committed
	for range 1 + rand.IntN(3) {
		agg := fmt.Sprintf("%s%d", prefix, rand.IntN(100))
		n := seq[agg] + 1
		id, err := outbox.Enqueue(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: agg,
			EventType: "order.changed", Payload: map[string]int{"seq": n}})
		if err != nil {
			return nil, err
		}
		seq[agg] = n
		evs = append(evs, relaytest.Committed{ID: id.String(), Aggregate: "order/" + agg, Seq: n})
	}
	if err := tx.Commit(ctx); err != nil {
		for _, ev := range evs {
			seq[ev.Aggregate[len("order/"):]]--
		}
		return nil, nil
	}
	return evs, nil
}

// slotState reports whether the slot exists on pool's server and whether a process streams it.
func slotState(pool *pgxpool.Pool, slot string) (exists, active bool) {
	err := pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
	return err == nil, active
}

// The operator's path to move decoding to a hot standby and back while producers write: stop
// the relay and start it again with --replication-dsn (then without it). Each time the relay
// finds the slot on the other server, creates the new slot, lets the old one deliver up to the
// new one's start, drops it and goes on with the new one. At least 5,000 events are written at a
// steady rate across each move: every one is delivered, first deliveries in order per
// aggregate, and the old slot is gone. (Before the move existed, the start with
// --replication-dsn was refused unless --no-backfill, and with --no-backfill everything
// committed between the stop and the new slot's creation was lost.)
func TestSlotMovesToTheStandbyAndBackLosingNothing(t *testing.T) {
	t.Parallel()
	requireVersion(t, cdc.StandbyDecodingVersion, "logical decoding on a standby")
	primary, standby, db := primaryWithStandby(t, nil, nil)
	pool, standbyPool := clusterPool(t, primary.DSN(db)), clusterPool(t, standby.DSN(db))
	recv := relaytest.NewReceiver(secret)
	t.Cleanup(recv.Close)
	e := &env{t: t, dsn: primary.DSN(db), pool: pool, recv: recv, slot: fmt.Sprintf("slot_%d", rand.Uint32())}
	r := e.start(nil) // the slot on the primary
	var all relaytest.Result
	for i, step := range []struct {
		name, replicationDSN string
		from, to             *pgxpool.Pool
	}{
		{"to the standby", standby.DSN(db), pool, standbyPool},
		{"back to the primary", "", standbyPool, pool},
	} {
		w := e.steadyWrites(fmt.Sprintf("m%d-", i), 5000)
		base := len(recv.Deliveries())
		waitFor(t, time.Minute, step.name+": deliveries under way", func() bool { return len(recv.Deliveries()) > base+500 })
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		r = e.startNoWait(func(c *Config) { c.ReplicationDSN = step.replicationDSN })
		waitFor(t, 2*time.Minute, step.name+": the old slot gone and the new one streaming", func() bool {
			oldThere, _ := slotState(step.from, e.slot)
			_, newActive := slotState(step.to, e.slot)
			return !oldThere && newActive
		})
		during := w.written.Load()
		res := w.wait()
		if during >= int64(len(res.Committed)) || during < 500 {
			t.Fatalf("%s: %d of %d events were written before the move was done: the writes did not span it",
				step.name, during, len(res.Committed))
		}
		all.Committed = append(all.Committed, res.Committed...)
		requireOK(t, e.waitDelivered(all, 2*time.Minute))
		t.Logf("%s: %d events written, %d of them before the move was done", step.name, len(res.Committed), during)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// A first start on a standby (no slot anywhere) while rows are pending: the slot is created on
// the standby with an exported snapshot, the rows pending in that snapshot (exactly those the
// slot will not carry) are recorded on the primary and delivered first, then the stream. Before
// this, such a start was refused unless --no-backfill, which never delivered those rows.
func TestFreshSlotOnAStandbyBackfillsThePendingRows(t *testing.T) {
	t.Parallel()
	requireVersion(t, cdc.StandbyDecodingVersion, "logical decoding on a standby")
	primary, standby, db := primaryWithStandby(t, nil, nil)
	pool, standbyPool := clusterPool(t, primary.DSN(db)), clusterPool(t, standby.DSN(db))
	recv := relaytest.NewReceiver(secret)
	t.Cleanup(recv.Close)
	e := &env{t: t, dsn: primary.DSN(db), pool: pool, recv: recv, slot: fmt.Sprintf("slot_%d", rand.Uint32())}
	w := e.steadyWrites("f", 1000)
	waitFor(t, time.Minute, "rows pending before the slot exists", func() bool { return w.written.Load() >= 500 })
	r := e.startNoWait(func(c *Config) { c.ReplicationDSN = standby.DSN(db) })
	waitFor(t, 2*time.Minute, "the slot streaming on the standby", func() bool { _, active := slotState(standbyPool, e.slot); return active })
	res := w.wait()
	requireOK(t, e.waitDelivered(res, 2*time.Minute))
	if there, _ := slotState(pool, e.slot); there {
		t.Fatal("a slot was created on the primary")
	}
	var left, recorded int
	_ = pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM outbox_backfill WHERE slot = $1),
		(SELECT count(*) FROM outbox_slot_location WHERE slot = $1 AND server IS NOT NULL)`, e.slot).Scan(&left, &recorded)
	if left != 0 || recorded != 1 {
		t.Fatalf("backfill rows left %d (want 0), location rows naming the standby %d (want 1)", left, recorded)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// A move whose old slot is dropped by hand before it reaches the fence: what committed between
// its last confirmed position and the fence is in no slot. The relay stops with ErrMoveBroken,
// having delivered nothing past the fence, and names the fix; one run with RecreateSlot creates
// the new slot again with a backfill (from the standby's snapshot) and nothing is lost.
func TestMoveWhoseOldSlotIsDroppedStopsAndRecreatingRecoversAll(t *testing.T) {
	t.Parallel()
	requireVersion(t, cdc.StandbyDecodingVersion, "logical decoding on a standby")
	ctx := context.Background()
	primary, standby, db := primaryWithStandby(t, nil, nil)
	pool, standbyPool := clusterPool(t, primary.DSN(db)), clusterPool(t, standby.DSN(db))
	recv := relaytest.NewReceiver(secret)
	t.Cleanup(recv.Close)
	e := &env{t: t, dsn: primary.DSN(db), pool: pool, recv: recv, slot: fmt.Sprintf("slot_%d", rand.Uint32())}
	r := e.start(nil)
	first := e.produce(relaytest.Workload{Events: 200, Aggregates: 20, MaxTxSize: 3})
	requireOK(t, e.waitDelivered(first, time.Minute))
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// Events the old slot holds and cannot deliver (the destination fails): it stays behind the
	// fence.
	var failing atomic.Bool
	failing.Store(true)
	recv.SetFail(func(*http.Request) int {
		if failing.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	second := e.produce(relaytest.Workload{Events: 200, Aggregates: 20, MaxTxSize: 3, Type: "invoice"})
	r = e.startNoWait(func(c *Config) { c.ReplicationDSN = standby.DSN(db) })
	waitFor(t, 2*time.Minute, "the move under way, the old slot streamed", func() bool {
		var moving bool
		_ = pool.QueryRow(ctx, `SELECT move_fence IS NOT NULL FROM outbox_slot_location WHERE slot = $1`, e.slot).Scan(&moving)
		_, active := slotState(pool, e.slot)
		return moving && active
	})
	waitFor(t, time.Minute, "the old slot dropped by hand", func() bool {
		_, _ = pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active`, e.slot)
		_, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, e.slot)
		there, _ := slotState(pool, e.slot)
		return err == nil || !there
	})
	var err error
	select {
	case err = <-r.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the relay went on after the old slot of its move was dropped")
	}
	close(r.done)
	if !errors.Is(err, cdc.ErrMoveBroken) || !strings.Contains(err.Error(), "RecreateSlot") {
		t.Fatalf("relay stopped with %v; want ErrMoveBroken naming the fix", err)
	}
	failing.Store(false)
	r = e.startNoWait(func(c *Config) { c.ReplicationDSN, c.RecreateSlot = standby.DSN(db), true })
	all := relaytest.Result{Committed: append(first.Committed, second.Committed...)}
	requireOK(t, e.waitDelivered(all, 2*time.Minute))
	if _, active := slotState(standbyPool, e.slot); !active {
		t.Fatal("the slot does not stream on the standby")
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
