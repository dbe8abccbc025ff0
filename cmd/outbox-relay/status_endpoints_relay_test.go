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

// Against a running relay with endpoints: status --endpoints shows what its lanes report (a
// healthy endpoint delivered, a failing one with its error, failures in a row and parked
// aggregates), and replay --endpoint re-sends the failing endpoint's parked aggregates once it
// is fixed, to it alone.
func TestStatusAndReplayOfARelayWithEndpoints(t *testing.T) {
	dsn, pool := migratedDB(t)
	ctx := context.Background()
	good := relaytest.NewReceiver("good-secret-0123456789")
	t.Cleanup(good.Close)
	var fixed atomic.Bool
	var badGot atomic.Int64
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if !fixed.Load() {
			http.Error(w, "unknown order", http.StatusUnprocessableEntity)
			return
		}
		badGot.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(bad.Close)
	for _, ep := range []endpoints.Endpoint{{ID: "good", URL: good.URL, Secret: "good-secret-0123456789"},
		{ID: "bad", URL: bad.URL, Secret: "bad-secret-0123456789"}} {
		if _, err := (endpoints.Store{}).Add(ctx, pool, ep); err != nil {
			t.Fatal(err)
		}
	}
	slot := fmt.Sprintf("slot_%d", rand.Uint32())
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- relay.Run(runCtx, relay.Config{DSN: dsn, Endpoints: true, Slot: slot, Publication: "pub_" + slot,
			RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond, MaxAttempts: 2, RequestTimeout: 2 * time.Second,
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
	for i := 1; i <= 3; i++ {
		if _, err := outbox.Enqueue(ctx, pool, outbox.Event{AggregateType: "order", AggregateID: fmt.Sprint(i),
			EventType: "order.created", Payload: map[string]int{"id": i}}); err != nil {
			t.Fatal(err)
		}
	}

	byID := func(doc endpointStatusDoc) map[string]int {
		m := map[string]int{}
		for i, e := range doc.Endpoints {
			m[e.ID] = i
		}
		return m
	}
	var doc endpointStatusDoc
	relaytest.WaitFor(t, time.Minute, "status --endpoints: good delivered, bad's 3 aggregates parked", func() bool {
		out, _, code := cli(t, "status", "--endpoints", "--json", "--dsn", dsn)
		if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Endpoints) != 2 {
			return false
		}
		g, b := doc.Endpoints[byID(doc)["good"]], doc.Endpoints[byID(doc)["bad"]]
		return g.LastSuccessAt != nil && g.Undelivered == 0 && b.ParkedAggregates == 3 && b.LastError != "" && good.Unique() >= 3
	})
	b := doc.Endpoints[byID(doc)["bad"]]
	if b.Pipeline != "default" || b.FailuresInRow == 0 || !strings.Contains(b.LastError, "422") {
		t.Errorf("bad in status --endpoints: %+v", b)
	}
	out, _, _ := cli(t, "status", "--endpoints", "--dsn", dsn, "--slot", slot)
	if !strings.Contains(squash(out), "default bad enabled 0") || !strings.Contains(out, "HTTP 422") ||
		!strings.Contains(out, "slot "+slot+" streamed") {
		t.Errorf("the table does not show bad's parked aggregates and error, or that the slot is streamed:\n%s", out)
	}

	out, errOut, code := cli(t, "replay", "--endpoint", "bad", "--dry-run", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "endpoint bad of pipeline default") || !strings.Contains(out, "would re-send 3 events of 3 aggregates") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	fixed.Store(true)
	goodBefore := len(good.Deliveries())
	if out, errOut, code := cli(t, "replay", "--endpoint", "bad", "--dsn", dsn); code != 0 {
		t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
	}
	relaytest.WaitFor(t, time.Minute, "bad received its 3 replayed events, and nothing is parked", func() bool {
		out, _, code := cli(t, "status", "--endpoints", "--json", "--dsn", dsn)
		if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Endpoints) != 2 {
			return false
		}
		return badGot.Load() >= 3 && doc.Endpoints[byID(doc)["bad"]].ParkedAggregates == 0
	})
	if badGot.Load() != 3 || len(good.Deliveries()) != goodBefore {
		t.Errorf("after the replay: bad got %d (want 3), good got %d more (want 0: the replay is bad's alone)",
			badGot.Load(), len(good.Deliveries())-goodBefore)
	}
}
