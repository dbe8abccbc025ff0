package publisher

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
)

// recordDest delivers everything and records what it was sent.
type recordDest struct {
	mu   sync.Mutex
	sent []string
}

func (d *recordDest) Send(_ context.Context, m *envelope.Message, _ int) Result {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent = append(d.sent, m.ID)
	return Result{Delivered: true, Label: ResultSuccess}
}

func (d *recordDest) ids() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.sent)
}

// countAcks counts what a publisher settles, per transaction.
type countAcks struct {
	mu       sync.Mutex
	events   map[*cdc.Tx]int
	controls map[*cdc.Tx]int
}

func (a *countAcks) Ack(tx *cdc.Tx, _ *envelope.Message) { a.mu.Lock(); a.events[tx]++; a.mu.Unlock() }
func (a *countAcks) AckControl(tx *cdc.Tx)               { a.mu.Lock(); a.controls[tx]++; a.mu.Unlock() }
func (a *countAcks) Grow(*cdc.Tx, []*envelope.Message)   {}

func (a *countAcks) counts(tx *cdc.Tx) (events, controls int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.events[tx], a.controls[tx]
}

// A transaction's control records travel beside its events: the destination is sent the
// events only, and each record is settled once (here a replay request for another pipeline,
// and a record of a kind the publisher does not act on), so the transaction can be confirmed.
func TestControlRecordsAreSettledAndNeverSent(t *testing.T) {
	dest := &recordDest{}
	acks := &countAcks{events: map[*cdc.Tx]int{}, controls: map[*cdc.Tx]int{}}
	p := New(Config{MaxInFlight: 2}, dest, acks, nil)
	tx := &cdc.Tx{CommitLSN: 0x10, CommitTime: time.Now(), Events: []*envelope.Message{
		{ID: "a1", AggregateType: "order", AggregateID: "a", Sequence: envelope.Sequence(0x10, 0)},
		{ID: "a2", AggregateType: "order", AggregateID: "a", Sequence: envelope.Sequence(0x10, 1)},
	}, Controls: []cdc.Control{
		{At: 1, Replay: &cdc.ReplayRequest{Pipeline: "billing", Aggregates: []cdc.Aggregate{{Type: "order", ID: "a"}}}},
		{At: 2},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in := make(chan *cdc.Tx, 1)
	in <- tx
	done := make(chan struct{})
	runCtx, stop := context.WithCancel(ctx)
	go func() { defer close(done); p.Run(runCtx, in) }()
	for {
		if events, controls := acks.counts(tx); events == 2 && controls == 2 {
			break
		}
		if ctx.Err() != nil {
			events, controls := acks.counts(tx)
			t.Fatalf("settled %d events and %d control records of 2 and 2", events, controls)
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	<-done
	if got := dest.ids(); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("sent %v, want the two events in order and nothing for the control records", got)
	}
}
