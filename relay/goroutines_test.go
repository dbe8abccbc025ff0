package relay

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// noLeaks fails the test when goroutines other than those of ignore remain, as goleak finds
// them: it retries while goroutines that are ending (a connection the other side closed) still
// run, for up to 10s under load.
func noLeaks(t *testing.T, what string, ignore goleak.Option) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if err = goleak.Find(ignore); err == nil {
			return
		}
	}
	t.Fatalf("%s: %v", what, err)
}

func gaugeIs(reg *prometheus.Registry, name string, want float64) bool {
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0].GetGauge().GetValue() == want
		}
	}
	return false
}

// Every goroutine Run starts (stream, publisher and its workers, retry timers, the backfill
// waiter, marker, gauges, poller, retention, HTTP server) has ended when Run returns, even when
// it is stopped in the middle of a backfill page whose deliveries keep failing: started and
// stopped 100 times, the process holds no goroutine it did not hold before (goleak).
func TestStartStopLeavesNoGoroutines(t *testing.T) {
	// Not parallel: counts the process's goroutines.
	e := newEnv(t)
	// Rows pending before the slot exists make a backfill, which a failing endpoint never
	// finishes: each run stops with a page under way and retries scheduled.
	e.produce(relaytest.Workload{Events: 8, Aggregates: 4, MaxTxSize: 1})
	var attempts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		attempts.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()

	earlier := goleak.IgnoreCurrent()
	cycle := func(i int) {
		t.Helper()
		cfg := e.config()
		cfg.WebhookURL = srv.URL
		cfg.NoBackfill = false // the default: a backfill page is under way when each cycle stops
		cfg.MetricsAddr = "127.0.0.1:0"
		cfg.Retention = time.Hour
		reg := prometheus.NewRegistry()
		cfg.Registerer = reg
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		before := attempts.Load()
		go func() { done <- Run(ctx, cfg) }()
		waitFor(t, 30*time.Second, "streaming, and a backfill delivery attempted", func() bool {
			return gaugeIs(reg, "outbox_relay_streaming", 1) && attempts.Load() > before
		})
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("cycle %d: Run returned %v, want nil after a stop", i, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("cycle %d: Run did not return within 30s of the stop", i)
		}
		srv.CloseClientConnections()
		noLeaks(t, fmt.Sprintf("cycle %d: goroutines still running after Run returned", i), earlier)
	}

	for i := range 100 {
		cycle(i) // the first creates the slot and records the backfill
	}
}
