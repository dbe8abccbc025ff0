package relay_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/signature"
)

// A program outside this module can assemble a relay from the public packages alone: a stream,
// a publisher sending to a webhook, and its own Prometheus registry, which then holds the
// series of both. (Only the test cluster comes from internal/pgtest.)
func TestPublicPackagesConfigureAStreamAndAPublisher(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := pgtest.NewDB(t)
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	if _, err := cdc.Setup(ctx, dsn, "ext", "ext", cdc.SetupOptions{}); err != nil {
		t.Fatal(err)
	}

	const secret = "a-secret"
	var verified atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !signature.VerifyX([][]byte{[]byte(secret)}, r.Header.Get("X-Timestamp"), body, r.Header.Values("X-Signature")...) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		verified.Add(1)
	}))
	defer srv.Close()

	reg := prometheus.NewRegistry()
	tracker := cdc.NewTracker(1000, 1<<20)
	stream := cdc.NewStream(cdc.Config{DSN: dsn, Slot: "ext", Publication: "ext", Registerer: reg}, tracker)
	hook, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	defer hook.Close()
	var dest destination.Destination = hook
	pub := publisher.New(publisher.Config{Registerer: reg}, dest, tracker, nil)

	runCtx, stop := context.WithCancel(ctx)
	txs := make(chan *cdc.Tx, 16)
	drained := make(chan struct{})
	var g errgroup.Group
	g.Go(func() error { return stream.Run(runCtx, txs, drained) })
	g.Go(func() error {
		defer close(drained)
		pub.Run(runCtx, txs)
		return nil
	})

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := outbox.Enqueue(ctx, conn, outbox.Event{AggregateType: "order", AggregateID: "1",
		EventType: "order.created", Payload: map[string]int{"order_id": 1}}); err != nil {
		t.Fatal(err)
	}

	for value(t, reg, "outbox_relay_events_delivered_total") < 1 {
		if ctx.Err() != nil {
			t.Fatalf("the event was not delivered: %d verified deliveries, %v received by the stream",
				verified.Load(), value(t, reg, "outbox_relay_events_received_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := g.Wait(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if n := verified.Load(); n != 1 {
		t.Errorf("%d signed deliveries verified, want 1", n)
	}
	if v := value(t, reg, "outbox_relay_events_received_total"); v != 1 {
		t.Errorf("outbox_relay_events_received_total %v in the caller's registry, want 1", v)
	}
}

// value returns the value of the single-series counter or gauge name in reg, 0 if absent.
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name || len(f.GetMetric()) != 1 {
			continue
		}
		m := f.GetMetric()[0]
		if m.GetCounter() != nil {
			return m.GetCounter().GetValue()
		}
		return m.GetGauge().GetValue()
	}
	return 0
}
