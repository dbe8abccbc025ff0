package pipeconf

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/relay"
)

// contentTypes records the Content-Type of every request a receiver gets.
type contentTypes struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *contentTypes) watch(r *relaytest.Receiver) {
	c.seen = map[string]int{}
	r.SetFail(func(req *http.Request) int {
		c.mu.Lock()
		defer c.mu.Unlock()
		ct := req.Header.Get("Content-Type")
		if req.Header.Get("Ce-Id") != "" {
			ct = "binary cloudevent " + ct
		}
		if enc := req.Header.Get("Content-Encoding"); enc != "" {
			ct += "; encoding " + enc
		}
		c.seen[ct]++
		return 0
	})
}

func (c *contentTypes) get() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.seen {
		out[k] = v
	}
	return out
}

// A file with two pipelines, one `format: cloudevents` with `batch` and gzip, one raw, runs
// through relay.Run as parsed: every event reaches both receivers, each in its own format.
func TestRunAParsedFile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	ctx := context.Background()
	cluster, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cluster.Close() })
	db, err := cluster.CreateDatabase(ctx, "pipeconf_run")
	if err != nil {
		t.Fatal(err)
	}
	dsn := cluster.DSN(db)
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := relaytest.Pool(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	ceRecv, rawRecv := relaytest.NewReceiver("ce-secret"), relaytest.NewReceiver("raw-secret")
	t.Cleanup(ceRecv.Close)
	t.Cleanup(rawRecv.Close)
	var ceTypes, rawTypes contentTypes
	ceTypes.watch(ceRecv)
	rawTypes.watch(rawRecv)

	file := fmt.Sprintf(`dsn: ${DB_DSN}
pipelines:
  - name: ce
    webhook:
      url: %s
      secret: ${CE_SECRET}
    format: cloudevents
    source: /test/ce
    batch:
      max_events: 50
      max_bytes: 64KiB
      linger: 20ms
    compression: gzip
    on_gone: retry
    retry_min: 10ms
    retry_max: 200ms
  - name: plain
    webhook: { url: %s, secret: raw-secret }
    retry_min: 10ms
    retry_max: 200ms
`, ceRecv.URL, rawRecv.URL)
	f, err := Parse([]byte(file), env(map[string]string{"DB_DSN": dsn, "CE_SECRET": "ce-secret"}), files(nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg := relay.Config{DSN: f.DSN, Pipelines: f.Pipelines, Registerer: prometheus.NewRegistry(),
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("relay: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("relay did not stop within 30s")
		}
	})
	relaytest.WaitFor(t, 60*time.Second, "both slots created", func() bool {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ('outbox_relay_ce', 'outbox_relay_plain')`).Scan(&n)
		return n == 2
	})

	res, err := relaytest.Produce(ctx, pool, relaytest.Workload{Events: 300, Aggregates: 10, MaxTxSize: 20, Writers: 2})
	if err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 2*time.Minute, "every event at both receivers", func() bool {
		return len(relaytest.Check(res, ceRecv.Deliveries()).Lost) == 0 && len(relaytest.Check(res, rawRecv.Deliveries()).Lost) == 0
	})
	for name, r := range map[string]*relaytest.Receiver{"ce": ceRecv, "plain": rawRecv} {
		if rep := relaytest.Check(res, r.Deliveries()); !rep.OK() {
			t.Errorf("%s: guarantee broken: %s", name, rep)
		}
		if n := r.BadSignatures(); n != 0 {
			t.Errorf("%s: %d requests with a bad signature", name, n)
		}
	}

	// The cloudevents pipeline sent CloudEvents batches only, several events in some of them;
	// the raw pipeline sent one raw event per request.
	maxIDs := 0
	for _, req := range ceRecv.RequestLog() {
		if !req.Batch {
			t.Fatalf("ce: a request that is not a batch: %+v", req)
		}
		maxIDs = max(maxIDs, len(req.IDs))
	}
	if maxIDs < 2 {
		t.Errorf("ce: no request carried more than one event (largest %d)", maxIDs)
	}
	for ct := range ceTypes.get() {
		if !strings.HasPrefix(ct, "application/cloudevents-batch+json") || !strings.HasSuffix(ct, "; encoding gzip") {
			t.Errorf("ce: a request of Content-Type %q", ct)
		}
	}
	for _, req := range rawRecv.RequestLog() {
		if req.Batch || len(req.IDs) != 1 {
			t.Fatalf("plain: a request with %d events (batch %v)", len(req.IDs), req.Batch)
		}
	}
	for ct := range rawTypes.get() {
		if strings.Contains(ct, "cloudevent") || strings.Contains(ct, "encoding") {
			t.Errorf("plain: a request of Content-Type %q", ct)
		}
	}
	t.Logf("ce: %d requests, largest batch %d, content types %v; plain: %d requests, content types %v",
		len(ceRecv.RequestLog()), maxIDs, ceTypes.get(), len(rawRecv.RequestLog()), rawTypes.get())
}
