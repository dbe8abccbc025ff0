package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// writer commits single-event transactions over aggs aggregates, continuing each aggregate's
// sequence, until stop is closed.
type seqWriter struct {
	mu   sync.Mutex
	seq  map[string]int
	done []relaytest.Committed
}

func (w *seqWriter) write(t *testing.T, e *env, n, aggs int) {
	for i := 0; i < n; i++ {
		agg := fmt.Sprint(i % aggs)
		w.mu.Lock()
		w.seq[agg]++
		s := w.seq[agg]
		w.mu.Unlock()
		id, err := outbox.Enqueue(context.Background(), e.pool, outbox.Event{AggregateType: "order", AggregateID: agg,
			EventType: "order.changed", Payload: map[string]int{"seq": s}})
		if err != nil {
			t.Error(err)
			return
		}
		w.mu.Lock()
		w.done = append(w.done, relaytest.Committed{ID: id.String(), Aggregate: "order/" + agg, Seq: s})
		w.mu.Unlock()
	}
}

// Rows written before the slot existed are delivered once, in order, before the streamed
// events of their aggregate, with no gap or duplicate against the stream; writes go on while
// the slot is being created, so rows fall on both sides of its consistent point.
func TestBackfillDeliversPreexistingRowsOnceAndInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := &seqWriter{seq: map[string]int{}}
	w.write(t, e, 600, 12) // before the relay exists
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.write(t, e, 600, 12) }() // across slot creation
	r := e.start(nil)                                       // backfill is the default
	wg.Wait()
	w.write(t, e, 300, 12) // after
	res := relaytest.Result{Committed: w.done}
	rep := e.waitDelivered(res, time.Minute)
	requireOK(t, rep)
	if rep.Duplicates != 0 {
		t.Fatalf("%d duplicates between backfill and stream", rep.Duplicates)
	}
	var left int
	waitFor(t, 10*time.Second, "backfill record cleared", func() bool {
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_backfill`).Scan(&left)
		return left == 0
	})
	_ = r
}

// A relay started with --no-backfill on a new slot does not deliver older rows (and says so in
// the docs); this guards the test above from passing for the wrong reason.
func TestWithoutBackfillOlderRowsStayBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := &seqWriter{seq: map[string]int{}}
	w.write(t, e, 20, 2)
	e.start(func(c *Config) { c.NoBackfill = true })
	old := relaytest.Result{Committed: w.done}
	// Positive control: a row of each aggregate written now is delivered, and a backfill would
	// have delivered that aggregate's older rows before it.
	w.write(t, e, 2, 2)
	waitFor(t, 30*time.Second, "the rows written after the slot delivered", func() bool {
		return e.recv.Has(w.done[20].ID) && e.recv.Has(w.done[21].ID)
	})
	if rep := relaytest.Check(old, e.recv.Deliveries()); len(rep.Lost) != 20 {
		t.Fatalf("with --no-backfill, %d of 20 pre-slot rows were delivered", 20-len(rep.Lost))
	}
}

// --recreate-slot: an invalidated slot is dropped and created again, and the pending rows it
// lost are backfilled.
func TestRecreateSlotBackfillsWhatTheLostSlotHeld(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	ctx := context.Background()
	dsn, pool := clusterWithSlot(t, "lost")
	res, err := relaytest.Produce(ctx, pool, relaytest.Workload{Events: 200, Aggregates: 5, MaxTxSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	invalidate(t, pool, "lost")
	recv := relaytest.NewReceiver(secret)
	defer recv.Close()
	cfg := Config{DSN: dsn, WebhookURL: recv.URL, Secrets: []string{secret}, Slot: "lost", Publication: "pub",
		RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	// Without --recreate-slot the relay refuses, naming the fix.
	if err := Run(ctx, cfg); !errors.Is(err, cdc.ErrSlotInvalid) {
		t.Fatalf("invalidated slot without --recreate-slot: %v", err)
	}
	cfg.RecreateSlot = true
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- Run(runCtx, cfg) }()
	deadline := time.Now().Add(time.Minute)
	for len(relaytest.Check(res, recv.Deliveries()).Lost) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	requireOK(t, relaytest.Check(res, recv.Deliveries()))
}
