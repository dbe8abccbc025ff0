// Package desttest drives a broker destination the way the relay does, for the destinations'
// own tests: a publisher over it, events of several aggregates, broker outages while they
// flow, and the checks on what the broker stored. It never runs inside outbox-relay.
package desttest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// The run's size: Aggregates aggregates of PerAggregate events each, event n of aggregate
// "agg-NN" with id "agg-NN-nnnn" (what the event function passed to AcrossOutages must make).
const (
	Aggregates   = 20
	PerAggregate = 50
)

// AcrossOutages publishes every event through dest with a publisher (16 in flight, retries
// from 20ms to 200ms, batch as given), each in a transaction of its own, calls outage(0) once a
// quarter of them are acknowledged and outage(1) once half are, and returns the acknowledged
// ids once all are. It fails t unless some attempt failed (the outages then tested no retry),
// and, batched, unless some batch carried several events.
func AcrossOutages(t *testing.T, ctx context.Context, dest destination.Destination, batch publisher.Batch,
	event func(agg string, n int) *envelope.Message, outage func(i int)) (acked []string) {
	t.Helper()
	c := &counter{}
	var wrapped destination.Destination = countedDest{dest, c}
	if pd, ok := dest.(destination.PartialBatchDestination); ok {
		wrapped = countedPartial{countedDest{dest, c}, pd}
	}
	a := &acks{}
	pub := publisher.New(publisher.Config{MaxInFlight: 16, RetryMin: 20 * time.Millisecond,
		RetryMax: 200 * time.Millisecond, Batch: batch}, wrapped, a, nil)
	txs := make(chan *cdc.Tx)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); pub.Run(runCtx, txs) }()
	const total = Aggregates * PerAggregate
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		for i, at := range []int{total / 4, total / 2} {
			for a.n() < at && ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			outage(i)
		}
	}()
	for n := 0; n < PerAggregate; n++ {
		for g := 0; g < Aggregates; g++ {
			txs <- &cdc.Tx{CommitTime: time.Now(), Events: []*envelope.Message{event(fmt.Sprintf("agg-%02d", g), n)}}
		}
	}
	<-faults
	for a.n() < total {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d events acknowledged", a.n(), total)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done
	if c.failed.Load() == 0 {
		t.Fatal("no attempt failed: the outages were not noticed, so this test tested no retry")
	}
	if batch.Enabled() && c.batches.Load() == 0 {
		t.Fatal("no batch of several events was sent: this run tested single events only")
	}
	t.Logf("%d failed attempts, %d batches of several events", c.failed.Load(), c.batches.Load())
	return a.all()
}

// Stored is one message as the broker holds it, in the broker's order: its event id, its
// aggregate, and where it is (for the error message).
type Stored struct {
	ID, Aggregate, Where string
}

// CheckOrder fails t unless, per aggregate, the first appearances of its events in stored are
// events 0, 1, 2, ... in that order (commit order), every acknowledged id is stored, and every
// event of the run is. It returns the number of distinct events stored.
func CheckOrder(t *testing.T, stored []Stored, acked []string) int {
	t.Helper()
	seen := map[string]bool{}
	next := map[string]int{}
	for _, m := range stored {
		if seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		var n int
		fmt.Sscanf(strings.TrimPrefix(m.ID, m.Aggregate+"-"), "%d", &n)
		if n != next[m.Aggregate] {
			t.Fatalf("aggregate %s: first appearance of event %d at %s, want event %d (commit order)", m.Aggregate, n, m.Where, next[m.Aggregate])
		}
		next[m.Aggregate]++
	}
	for _, id := range acked {
		if !seen[id] {
			t.Errorf("event %s acknowledged but not in the broker", id)
		}
	}
	if len(seen) != Aggregates*PerAggregate {
		t.Fatalf("%d distinct events in the broker, want %d", len(seen), Aggregates*PerAggregate)
	}
	return len(seen)
}

// counter counts failed attempts and the batches of several events sent.
type counter struct{ failed, batches atomic.Int64 }

type countedDest struct {
	destination.Destination
	c *counter
}

func (d countedDest) Send(ctx context.Context, m *envelope.Message, attempt int) destination.Result {
	r := d.Destination.Send(ctx, m, attempt)
	if !r.Delivered {
		d.c.failed.Add(1)
	}
	return r
}

// countedPartial keeps a PartialBatchDestination one, counting its batches too.
type countedPartial struct {
	countedDest
	pd destination.PartialBatchDestination
}

func (d countedPartial) SendBatch(ctx context.Context, ms []*envelope.Message, attempt int) destination.Result {
	if len(ms) > 1 {
		d.c.batches.Add(1)
	}
	r := d.pd.SendBatch(ctx, ms, attempt)
	if !r.Delivered {
		d.c.failed.Add(1)
	}
	return r
}

func (d countedPartial) PartialBatches() {}

// acks records the events the publisher settled.
type acks struct {
	mu  sync.Mutex
	ids []string
}

func (a *acks) Ack(_ *cdc.Tx, m *envelope.Message) {
	a.mu.Lock()
	a.ids = append(a.ids, m.ID)
	a.mu.Unlock()
}
func (a *acks) AckControl(*cdc.Tx)                {}
func (a *acks) Grow(*cdc.Tx, []*envelope.Message) {}
func (a *acks) n() int                            { a.mu.Lock(); defer a.mu.Unlock(); return len(a.ids) }

func (a *acks) all() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.ids...)
}
