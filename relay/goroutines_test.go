package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// ownedFrames are the functions of goroutines that Run starts; none may run once it returns.
var ownedFrames = []string{
	"outbox-relay/relay.(*runner)", "outbox-relay/cdc.", "outbox-relay/publisher.",
	"outbox-relay/internal/inspect.", "outbox-relay/outbox.",
}

// owned returns the stacks of goroutines running code that Run owns, by their header
// ("goroutine 42 [select]:" names the goroutine's id).
func owned() map[string]string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		id, _, _ := strings.Cut(g, " [")
		for _, line := range strings.Split(g, "\n") {
			if strings.HasPrefix(line, "created by") {
				continue
			}
			if containsAny(line, ownedFrames) {
				out[id] = g
				break
			}
		}
	}
	return out
}

// leftovers returns the stacks of goroutines running code that Run owns, other than those
// in before (left by earlier tests).
func leftovers(before map[string]string) []string {
	var out []string
	for id, g := range owned() {
		if _, old := before[id]; !old {
			out = append(out, g)
		}
	}
	return out
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
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
// stopped 100 times, the process holds no more goroutines than before.
func TestStartStopLeavesNoGoroutines(t *testing.T) {
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

	earlier := owned()
	cycle := func(i int) {
		t.Helper()
		cfg := e.config()
		cfg.WebhookURL = srv.URL
		cfg.NoBackfill = false // the default: a backfill page is under way when each cycle stops
		cfg.MetricsAddr = "127.0.0.1:0"
		cfg.Retention = time.Hour
		cfg.Registry = prometheus.NewRegistry()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		before := attempts.Load()
		go func() { done <- Run(ctx, cfg) }()
		waitFor(t, 30*time.Second, "streaming, and a backfill delivery attempted", func() bool {
			return gaugeIs(cfg.Registry, "outbox_relay_streaming", 1) && attempts.Load() > before
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
		if left := leftovers(earlier); len(left) > 0 {
			t.Fatalf("cycle %d: %d goroutines of Run still running after it returned:\n\n%s", i, len(left),
				strings.Join(left, "\n\n"))
		}
	}

	cycle(0) // creates the slot and records the backfill
	srv.CloseClientConnections()
	base := runtime.NumGoroutine()
	const cycles = 100
	for i := 1; i <= cycles; i++ {
		cycle(i)
	}
	srv.CloseClientConnections()
	// Goroutines of connections closed by the other side (the test server's, pgx's) end a
	// moment later; the relay's own have ended already (checked in each cycle).
	deadline := time.Now().Add(10 * time.Second)
	n := runtime.NumGoroutine()
	for ; n > base+2 && time.Now().Before(deadline); n = runtime.NumGoroutine() {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("goroutines: %d before %d start/stop cycles, %d after", base, cycles, n)
	if n > base+2 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines after %d start/stop cycles, %d before:\n%s", n, cycles, base, buf[:runtime.Stack(buf, true)])
	}
}
