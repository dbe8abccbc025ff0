package publisher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/publisher"
)

type nopDest struct{}

func (nopDest) Send(context.Context, *envelope.Message, int) publisher.Result {
	return publisher.Result{Delivered: true, Label: publisher.ResultSuccess}
}

type nopMarks struct{}

func (nopMarks) Done(string, string, int) {}

// BenchmarkDeliver is the engine's own cost per event, the destination aside: a transaction of
// one event each, over 1,000 aggregates, queued, sent to a destination that accepts at once,
// marked and acknowledged to a real tracker (go test -bench Deliver -benchmem). The stream's
// decoding is not included.
func BenchmarkDeliver(b *testing.B) {
	txs := make([]*cdc.Tx, b.N)
	for i := range txs {
		m := &envelope.Message{ID: fmt.Sprintf("0193a0c4-6c1e-7cc2-9f1a-%012d", i), EventType: "order.created",
			AggregateType: "order", AggregateID: fmt.Sprintf("%08d-aggregate-%04d", i%1000, i%1000),
			Payload: []byte(`{"order_id":42}`), Sequence: envelope.Sequence(uint64(i), 0), CommitTime: time.Now()}
		txs[i] = &cdc.Tx{EndLSN: 0, CommitTime: m.CommitTime, Events: []*envelope.Message{m}}
	}
	tr := cdc.NewTracker(1<<30, 1<<40)
	p := publisher.New(publisher.Config{MaxInFlight: 64}, nopDest{}, tr, nopMarks{})
	in := make(chan *cdc.Tx, 64)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx, in) }()
	b.ReportAllocs()
	b.ResetTimer()
	for _, tx := range txs {
		tr.Add(tx)
		in <- tx
	}
	for tr.Outstanding() > 0 {
		time.Sleep(50 * time.Microsecond)
	}
	b.StopTimer()
	stop()
	<-done
}
