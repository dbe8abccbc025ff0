package kafkadest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"log/slog"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/destination/kafkadest"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/desttest"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/tests/internal/kafkatest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func event(agg string, n int) *envelope.Message {
	return &envelope.Message{ID: fmt.Sprintf("%s-%04d", agg, n), AggregateType: "order", AggregateID: agg,
		EventType: "order.created", Payload: []byte(fmt.Sprintf(`{"n":%d}`, n)),
		Headers:  []byte(`{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`),
		Sequence: envelope.Sequence(uint64(1000+n), 0), CommitTime: time.Now()}
}

// One record: the outbox event router's topic, key and id header, the payload as value, and
// the webhook contract's headers.
func TestSendRecord(t *testing.T) {
	ctx := testCtx(t)
	kc := kafkatest.Start(t, 1, 3, "outbox.event.order")
	d, err := kafkadest.New(ctx, kafkadest.Config{Brokers: kc.Brokers()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ev := event("o-1", 1)
	if r := d.Send(ctx, ev, 1); !r.Delivered || r.Label != destination.ResultSuccess {
		t.Fatalf("send: %+v", r)
	}
	recs := kafkatest.ReadTopic(ctx, t, kc.Brokers(), "outbox.event.order")
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	r := recs[0]
	if string(r.Key) != "o-1" || string(r.Value) != `{"n":1}` {
		t.Errorf("key %q value %q", r.Key, r.Value)
	}
	for k, want := range map[string]string{"id": ev.ID, "X-Event-Id": ev.ID, "X-Event-Type": "order.created",
		"X-Aggregate-Type": "order", "X-Aggregate-Id": "o-1", "X-Event-Sequence": ev.Sequence,
		"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		if got := r.Headers[k]; got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	// A topic that does not exist is a failed attempt, labelled as a broker's refusal.
	missing := &envelope.Message{ID: "x", AggregateType: "nope", AggregateID: "1", Payload: []byte(`{}`), Sequence: ev.Sequence}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if r := d.Send(sctx, missing, 1); r.Delivered {
		t.Fatalf("send to a missing topic delivered: %+v", r)
	}
}

// The publisher through this destination while the cluster restarts twice: every event in the
// topic, each aggregate's first appearances in commit order, every acknowledged event stored;
// one record per attempt, and in batches of up to 20 records produced at once.
func TestOrderAcrossRetriesAndClusterRestart(t *testing.T) {
	t.Run("one per request", func(t *testing.T) { testOrderAcrossRestarts(t, publisher.Batch{}) })
	t.Run("batch 20", func(t *testing.T) { testOrderAcrossRestarts(t, publisher.Batch{MaxEvents: 20}) })
}

func testOrderAcrossRestarts(t *testing.T, batch publisher.Batch) {
	ctx := testCtx(t)
	kc := kafkatest.Start(t, 3, 4, "outbox.event.order")
	d, err := kafkadest.New(ctx, kafkadest.Config{Brokers: kc.Brokers(), RequestTimeout: time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// Each outage is longer than an attempt may take; the cluster comes back from its data.
	acked := desttest.AcrossOutages(t, ctx, d, batch, event, func(int) {
		kc.Close()
		time.Sleep(1500 * time.Millisecond)
		kc.Restart()
	})
	recs := kafkatest.ReadTopic(ctx, t, kc.Brokers(), "outbox.event.order")
	stored := make([]desttest.Stored, len(recs))
	for i, r := range recs {
		stored[i] = desttest.Stored{ID: r.Headers["id"], Aggregate: string(r.Key), Where: fmt.Sprintf("%d/%d", r.Partition, r.Offset)}
	}
	n := desttest.CheckOrder(t, stored, acked)
	t.Logf("%d records stored for %d events", len(recs), n)
}
