package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Against a running relay with endpoints: an endpoint that fails twice (503 with a body), then
// accepts, leaves its two failed attempts (status, the answer's start) and its delivery in the
// delivery log, which `deliveries --event` and `deliveries --endpoint --failed` list, as JSON
// and as a table; an unknown endpoint's error names the command that lists them.
func TestDeliveriesOfAFailingThenRecoveringEndpoint(t *testing.T) {
	dsn, pool := migratedDB(t)
	ctx := context.Background()
	var calls atomic.Int64
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if calls.Add(1) <= 2 {
			http.Error(w, "warehouse offline, try later", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(flaky.Close)
	if _, err := (endpoints.Store{}).Add(ctx, pool, endpoints.Endpoint{ID: "flaky", URL: flaky.URL, Secret: "flaky-secret-0123456789"}); err != nil {
		t.Fatal(err)
	}
	slot := fmt.Sprintf("slot_%d", rand.Uint32())
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- relay.Run(runCtx, relay.Config{DSN: dsn, Endpoints: true, Slot: slot, Publication: "pub_" + slot,
			RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, RequestTimeout: 2 * time.Second,
			StatusInterval: 200 * time.Millisecond, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	relaytest.WaitFor(t, 30*time.Second, "slot active", func() bool {
		var active bool
		_ = pool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		return active
	})
	id, err := outbox.Enqueue(ctx, pool, outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created",
		Payload: map[string]int{"id": 1}})
	if err != nil {
		t.Fatal(err)
	}

	var ev eventDeliveries
	relaytest.WaitFor(t, time.Minute, "deliveries --event: delivered to flaky", func() bool {
		out, _, code := cli(t, "deliveries", "--event", id.String(), "--json", "--dsn", dsn)
		return code == 0 && json.Unmarshal([]byte(out), &ev) == nil && len(ev.Endpoints) == 1 && ev.Endpoints[0].Delivered != nil
	})
	e := ev.Endpoints[0]
	if ev.EventID != id.String() || e.Pipeline != "default" || e.Endpoint != "flaky" || e.Delivered.Attempt != 3 || e.Backlog != nil {
		t.Errorf("deliveries --event: %+v", ev)
	}
	if len(e.Failed) != 2 {
		t.Fatalf("deliveries --event: want 2 failed attempts, got %+v", e.Failed)
	}
	for i, a := range e.Failed {
		if a.Attempt != i+1 || a.Status != http.StatusServiceUnavailable || !strings.Contains(a.Error, "HTTP 503") ||
			!strings.Contains(a.Error, "warehouse offline, try later") || a.At.After(e.Delivered.At) {
			t.Errorf("failed attempt %d: %+v", i, a)
		}
	}
	out, errOut, code := cli(t, "deliveries", "--event", id.String(), "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "endpoint flaky (pipeline default): delivered at") || strings.Count(out, "warehouse offline, try later") != 2 {
		t.Errorf("deliveries --event table: exit %d\n%s%s", code, out, errOut)
	}

	var hist endpointDeliveries
	out, errOut, code = cli(t, "deliveries", "--endpoint", "flaky", "--failed", "--since", "1h", "--json", "--dsn", dsn)
	if code != 0 || json.Unmarshal([]byte(out), &hist) != nil {
		t.Fatalf("deliveries --endpoint --failed: exit %d\n%s%s", code, out, errOut)
	}
	if hist.Endpoint != "flaky" || len(hist.Entries) != 2 || hist.Entries[0].Attempt != 2 || hist.Entries[1].Attempt != 1 ||
		hist.Entries[0].Delivered || hist.Entries[0].EventID != id.String() || hist.NextUntil != nil {
		t.Errorf("deliveries --endpoint --failed (want attempts 2 then 1, newest first): %s", out)
	}
	out, errOut, code = cli(t, "deliveries", "--endpoint", "flaky", "--limit", "1", "--json", "--dsn", dsn)
	if code != 0 || json.Unmarshal([]byte(out), &hist) != nil || len(hist.Entries) != 1 || !hist.Entries[0].Delivered ||
		hist.NextUntil == nil {
		t.Errorf("deliveries --endpoint --limit 1: want the delivery, newest, and a next page: exit %d\n%s%s", code, out, errOut)
	}

	_, errOut, code = cli(t, "deliveries", "--endpoint", "nosuch", "--dsn", dsn)
	if code == 0 || !strings.Contains(errOut, "outbox-relay endpoint list") {
		t.Errorf("unknown endpoint: exit %d, want the fix named:\n%s", code, errOut)
	}
}
