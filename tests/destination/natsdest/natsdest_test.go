package natsdest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"log/slog"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/destination/natsdest"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/desttest"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/tests/internal/natstest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A missing stream is a start-up error naming the fix; create_stream creates it, and a second
// start finds it.
func TestStreamCheckAndCreate(t *testing.T) {
	ctx := testCtx(t)
	srv := natstest.Start(t)
	_, err := natsdest.New(ctx, natsdest.Config{URL: srv.URL()}, slog.New(slog.DiscardHandler))
	if !errors.Is(err, natsdest.ErrNoStream) || !strings.Contains(err.Error(), "create_stream") ||
		!strings.Contains(err.Error(), "outbox.*.*") {
		t.Fatalf("New without a stream: %v, want natsdest.ErrNoStream naming the subjects and create_stream", err)
	}
	d, err := natsdest.New(ctx, natsdest.Config{URL: srv.URL(), CreateStream: &natsdest.StreamConfig{Name: "OUTBOX"}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New with create_stream: %v", err)
	}
	d.Close()
	d, err = natsdest.New(ctx, natsdest.Config{URL: srv.URL()}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("New after the stream exists: %v", err)
	}
	d.Close()
	// A stream that captures only some of the subjects does not count.
	_, err = natsdest.New(ctx, natsdest.Config{URL: srv.URL(), Subject: "other.{aggregate_type}"}, slog.New(slog.DiscardHandler))
	if !errors.Is(err, natsdest.ErrNoStream) {
		t.Fatalf("New for subjects no stream covers: %v, want natsdest.ErrNoStream", err)
	}
}

func event(agg string, n int) *envelope.Message {
	return &envelope.Message{ID: fmt.Sprintf("%s-%04d", agg, n), AggregateType: "order", AggregateID: agg,
		EventType: "order.created", Payload: []byte(fmt.Sprintf(`{"n":%d}`, n)),
		Headers:  []byte(`{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","X-Event-Id":"forged"}`),
		Sequence: envelope.Sequence(uint64(1000+n), 0), CommitTime: time.Now()}
}

// One message: data, subject, Nats-Msg-Id and the contract's headers; a re-publish of the same
// event is dropped by the duplicate window and still reported delivered.
func TestSendMessageAndDuplicate(t *testing.T) {
	ctx := testCtx(t)
	srv := natstest.Start(t)
	d, err := natsdest.New(ctx, natsdest.Config{URL: srv.URL(), CreateStream: &natsdest.StreamConfig{Name: "OUTBOX"}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ev := event("o-1", 1)
	for attempt := 1; attempt <= 2; attempt++ {
		if r := d.Send(ctx, ev, attempt); !r.Delivered || r.Label != destination.ResultSuccess {
			t.Fatalf("attempt %d: %+v", attempt, r)
		}
	}
	msgs := natstest.ReadStream(ctx, t, srv.URL(), "OUTBOX")
	if len(msgs) != 1 {
		t.Fatalf("%d messages stored, want 1 (the re-publish dropped as a duplicate)", len(msgs))
	}
	m := msgs[0]
	if m.Subject != "outbox.order.order_created" || string(m.Data) != `{"n":1}` {
		t.Errorf("subject %q data %q", m.Subject, m.Data)
	}
	for k, want := range map[string]string{"Nats-Msg-Id": ev.ID, "X-Event-Id": ev.ID, "X-Event-Type": "order.created",
		"X-Aggregate-Type": "order", "X-Aggregate-Id": "o-1", "X-Event-Sequence": ev.Sequence,
		"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		if got := m.Header.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want [%q]", k, got, want)
		}
	}
}

// The publisher through this destination while the server crashes and comes back, twice:
// every event ends up in the stream, each aggregate's first appearances are in commit order
// (retries included), and every event acknowledged to the publisher is in the stream.
//
// Batched, the destination gets at most one event per aggregate per batch, published without
// waiting between them: a restart fails batches half way, and their retries must neither lose
// nor reorder anything.
func TestOrderAcrossRetriesAndServerRestart(t *testing.T) {
	t.Run("one per request", func(t *testing.T) { testOrderAcrossRestarts(t, publisher.Batch{}) })
	t.Run("batch 20", func(t *testing.T) { testOrderAcrossRestarts(t, publisher.Batch{MaxEvents: 20}) })
}

func testOrderAcrossRestarts(t *testing.T, batch publisher.Batch) {
	ctx := testCtx(t)
	srv := natstest.Start(t)
	d, err := natsdest.New(ctx, natsdest.Config{URL: srv.URL(), RequestTimeout: 500 * time.Millisecond,
		CreateStream: &natsdest.StreamConfig{Name: "OUTBOX"}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// The broker goes down twice while events keep coming and comes back on the same store:
	// first briefly, so that what the client buffers while it reconnects is sent after the
	// restart and acknowledged in time (while what was in flight at the crash is lost), then for
	// longer than the request timeout, so that attempts fail even when none was in flight.
	acked := desttest.AcrossOutages(t, ctx, d, batch, event, func(i int) {
		srv.Shutdown()
		time.Sleep([]time.Duration{200 * time.Millisecond, time.Second}[i])
		srv.Restart()
	})
	msgs := natstest.ReadStream(ctx, t, srv.URL(), "OUTBOX")
	stored := make([]desttest.Stored, len(msgs))
	for i, m := range msgs {
		stored[i] = desttest.Stored{ID: m.Header.Get("Nats-Msg-Id"), Aggregate: m.Header.Get("X-Aggregate-Id"),
			Where: fmt.Sprintf("stream seq %d", m.Seq)}
	}
	n := desttest.CheckOrder(t, stored, acked)
	t.Logf("%d messages stored for %d events", len(msgs), n)
}
