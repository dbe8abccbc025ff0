package relay

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/publisher"
)

func batchConfig(c *Config) {
	c.Delivery.Batch = publisher.Batch{MaxEvents: 20, Linger: 2 * time.Millisecond}
}

// failTenPercent fails about one request in ten, whatever it carries.
func failTenPercent(ds []relaytest.Delivery) int {
	if rand.IntN(10) == 0 {
		return http.StatusServiceUnavailable
	}
	return 0
}

// requireBatched fails unless the receiver saw CloudEvents batches, some of several events: the
// positive control that the relay really batched.
func requireBatched(t *testing.T, reqs []relaytest.Request) {
	t.Helper()
	multi := 0
	for _, r := range reqs {
		if !r.Batch {
			t.Fatalf("a request with ids %v was not a CloudEvents batch", r.IDs)
		}
		if len(r.IDs) > 1 {
			multi++
		}
	}
	if multi == 0 {
		t.Fatalf("no request of %d carried more than one event", len(reqs))
	}
	t.Logf("%d requests, %d of several events", len(reqs), multi)
}

// Batched delivery while the receiver fails one request in ten: nothing lost, order per
// aggregate, and a failed batch is retried as formed: the next request carrying its first event
// carries exactly its events, unless it had failed narrowAfter times in a row already, when it
// is its first half.
func TestBatchesRetriedAsFormedUnderFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.recv.SetFailEvents(failTenPercent)
	e.start(func(c *Config) { batchConfig(c); c.MaxAttempts = -1 })
	res := e.produce(relaytest.Workload{Events: 4000, Aggregates: 40, MaxTxSize: 10, Rollback: 0.05, Writers: 3})
	requireOK(t, e.waitDelivered(res, 2*time.Minute))
	reqs := e.recv.RequestLog()
	requireBatched(t, reqs)
	failed, narrowed := 0, 0
	for i, r := range reqs {
		if r.Status == http.StatusOK {
			continue
		}
		failed++
		// How many times in a row this composition had failed, this time included.
		streak := 1
		for j := i - 1; j >= 0; j-- {
			if slices.Contains(reqs[j].IDs, r.IDs[0]) {
				if reqs[j].Status == http.StatusOK || !slices.Equal(reqs[j].IDs, r.IDs) {
					break
				}
				streak++
			}
		}
		var next *relaytest.Request
		for j := i + 1; j < len(reqs); j++ {
			if slices.Contains(reqs[j].IDs, r.IDs[0]) {
				next = &reqs[j]
				break
			}
		}
		switch {
		case next == nil:
			t.Fatalf("failed batch %v never retried", r.IDs)
		case slices.Equal(next.IDs, r.IDs):
		case streak%2 == 0 && len(r.IDs) > 1 && len(next.IDs) < len(r.IDs) && slices.Equal(next.IDs, r.IDs[:len(next.IDs)]):
			narrowed++
		default:
			t.Fatalf("batch %v failed (%d in a row) and was retried as %v: not as formed", r.IDs, streak, next.IDs)
		}
	}
	if failed == 0 {
		t.Fatal("the receiver failed no request: the test proves nothing")
	}
	t.Logf("%d failed requests, %d retries narrowed", failed, narrowed)
}

// A poison event in a batch: the batch is narrowed until the event stands alone, then only it
// is dead-lettered and only its aggregate parked. Its aggregate's earlier events, and every
// event that shared a batch with it, are delivered.
func TestPoisonEventInBatchParksOnlyItsAggregate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const poisonSeq = 3
	e.recv.SetFailEvents(func(ds []relaytest.Delivery) int {
		for _, d := range ds {
			if d.Aggregate == poisonAgg && d.Seq == poisonSeq {
				return http.StatusUnprocessableEntity
			}
		}
		return 0
	})
	e.start(func(c *Config) { batchConfig(c); deadLetterConfig(c) })
	res := e.produce(relaytest.Workload{Events: 2000, Aggregates: 20, MaxTxSize: 10})
	n := poisonCount(res)
	if n <= poisonSeq {
		t.Fatalf("workload has %d events of %s; the test needs more than %d", n, poisonAgg, poisonSeq)
	}
	var want relaytest.Result
	for _, c := range res.Committed {
		if c.Aggregate != poisonAgg || c.Seq < poisonSeq {
			want.Committed = append(want.Committed, c)
		}
	}
	requireOK(t, e.waitDelivered(want, time.Minute))
	waitFor(t, 30*time.Second, "the poison event failed and the rest of its aggregate parked", func() bool {
		c := e.statusCounts(poisonAgg)
		return c["failed"] == 1 && c["parked"] == n-poisonSeq
	})
	var failedSeq int
	if err := e.pool.QueryRow(context.Background(), `SELECT (payload->>'seq')::int FROM outbox_events WHERE status = 'failed'`).
		Scan(&failedSeq); err != nil || failedSeq != poisonSeq {
		t.Fatalf("failed row has seq %d (%v), want %d", failedSeq, err, poisonSeq)
	}
	for _, d := range e.recv.Deliveries() {
		if d.Aggregate == poisonAgg && d.Seq >= poisonSeq {
			t.Fatalf("event seq %d of the parked aggregate was accepted", d.Seq)
		}
	}
	var parked int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_parked_aggregates`).Scan(&parked)
	if parked != 1 {
		t.Fatalf("%d aggregates parked, want 1", parked)
	}
	// Positive control: the poison really shared a batch with other events before it stood alone.
	shared, alone := false, false
	for _, r := range e.recv.RequestLog() {
		if r.Status == http.StatusUnprocessableEntity {
			shared = shared || len(r.IDs) > 1
			alone = alone || len(r.IDs) == 1
		}
	}
	if !shared || !alone {
		t.Fatalf("the poison was in a batch of several: %v, alone: %v; want both", shared, alone)
	}
}

// Batched, gzip-compressed delivery while the relay binary is SIGKILLed and one request in ten
// fails: nothing lost, first deliveries in order per aggregate.
func TestBatchedDeliverySurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.recv.SetFailEvents(failTenPercent)
	args := []string{"--batch-max-events", "50", "--batch-linger", "2ms", "--compression", "gzip", "--max-attempts", "-1"}
	cmd := e.process(args...)
	e.waitSlot()
	produced := make(chan relaytest.Result, 1)
	go func() {
		res, err := relaytest.Produce(context.Background(), e.pool,
			relaytest.Workload{Events: 6000, Aggregates: 60, MaxTxSize: 10, Rollback: 0.05, Writers: 3})
		if err != nil {
			t.Error(err)
		}
		produced <- res
	}()
	for kills := 0; kills < 3; kills++ {
		time.Sleep(time.Duration(300+rand.IntN(500)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		cmd = e.process(args...)
	}
	res := <-produced
	requireOK(t, e.waitDelivered(res, 2*time.Minute))
	requireBatched(t, e.recv.RequestLog())
}

// --marks off: everything is delivered and confirmed, and no row is marked, even after the
// relay's final flush at stop; with the default (done), the same run marks every row.
func TestMarksOffLeavesRowsPending(t *testing.T) {
	t.Parallel()
	for _, mode := range []publisher.MarksMode{publisher.MarksOff, publisher.MarksDone} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t)
			r := e.start(func(c *Config) { batchConfig(c); c.Delivery.Marks = mode })
			res := e.produce(relaytest.Workload{Events: 300, Aggregates: 10, MaxTxSize: 5})
			end := e.currentLSN()
			requireOK(t, e.waitDelivered(res, time.Minute))
			waitFor(t, 30*time.Second, "slot confirmed past the workload", func() bool {
				c, _ := e.slotLSNs()
				return c >= end
			})
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			var done int
			if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events WHERE status = 'done'`).Scan(&done); err != nil {
				t.Fatal(err)
			}
			want := 0
			if mode == publisher.MarksDone {
				want = len(res.Committed)
			}
			if done != want {
				t.Fatalf("marks %s: %d rows done, want %d", mode, done, want)
			}
		})
	}
}
