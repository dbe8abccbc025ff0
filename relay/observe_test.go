package relay

import (
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// withHTTP serves the relay's /metrics, /healthz and /readyz on a free port and returns its
// address through addr.
func withHTTP(addr *atomic.Value) func(*Config) {
	return func(c *Config) {
		c.MetricsAddr = "127.0.0.1:0"
		c.Ready = func(a string) { addr.Store(a) }
	}
}

func get(t *testing.T, addr *atomic.Value, path string) (int, string) {
	t.Helper()
	a, _ := addr.Load().(string)
	if a == "" {
		return 0, "not listening yet"
	}
	resp, err := http.Get("http://" + a + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// /readyz answers 503 while the relay stands by or is stalled, and 200 once it streams and
// delivers; /healthz is 200 throughout.
func TestReadiness(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var leaderAddr, standbyAddr atomic.Value
	leader := e.start(func(c *Config) {
		withHTTP(&leaderAddr)(c)
		c.StallTimeout = time.Second
		c.RequestTimeout = time.Minute
	})
	waitFor(t, 10*time.Second, "leader ready", func() bool { code, _ := get(t, &leaderAddr, "/readyz"); return code == 200 })
	e.start(withHTTP(&standbyAddr))
	waitFor(t, 10*time.Second, "standby not ready", func() bool {
		code, body := get(t, &standbyAddr, "/readyz")
		return code == 503 && strings.Contains(body, "not streaming")
	})
	if code, _ := get(t, &standbyAddr, "/healthz"); code != 200 {
		t.Fatalf("standby /healthz = %d", code)
	}

	// Stall: events wait and nothing is delivered for longer than the stall timeout.
	e.recv.Hang()
	res := e.produce(relaytest.Workload{Events: 10, Aggregates: 2, MaxTxSize: 2})
	waitFor(t, 15*time.Second, "stalled leader not ready", func() bool {
		code, body := get(t, &leaderAddr, "/readyz")
		return code == 503 && strings.Contains(body, "stalled")
	})
	e.recv.Unhang()
	requireOK(t, e.waitDelivered(res, 30*time.Second))
	waitFor(t, 10*time.Second, "ready again after recovery", func() bool { code, _ := get(t, &leaderAddr, "/readyz"); return code == 200 })
	// The relay counts a delivery after the receiver has recorded it: wait for the count.
	waitFor(t, 10*time.Second, "/metrics to show 10 deliveries", func() bool {
		code, body := get(t, &leaderAddr, "/metrics")
		return code == 200 && strings.Contains(body, `outbox_relay_events_delivered_total{pipeline="default"} 10`+"\n")
	})
	_ = leader
}

// After a run, the counters agree with what the receiver saw.
func TestMetricsMatchTheReceiver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var failed atomic.Int64
	e.recv.SetFail(func(*http.Request) int {
		if rand.Float64() < 0.2 {
			failed.Add(1)
			return http.StatusServiceUnavailable
		}
		return 0
	})
	r := e.start(nil)
	res := e.produce(relaytest.Workload{Events: 500, Aggregates: 20, MaxTxSize: 5})
	requireOK(t, e.waitDelivered(res, 30*time.Second))
	// The receiver records a delivery before its response reaches the relay, which counts it
	// after: stopping the relay waits for every count.
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	accepted := float64(len(e.recv.Deliveries()))
	checks := []struct {
		name  string
		label []string
		want  float64
	}{
		{"outbox_relay_events_received_total", nil, 500},
		{"outbox_relay_events_delivered_total", nil, accepted},
		{"outbox_relay_delivery_attempts_total", []string{"result", "success"}, accepted},
		{"outbox_relay_delivery_attempts_total", []string{"result", "http_5xx"}, float64(failed.Load())},
		{"outbox_relay_delivery_attempts_total", []string{"result", "timeout"}, 0},
		{"outbox_relay_events_dead_lettered_total", nil, 0},
	}
	for _, c := range checks {
		if got := r.metric(t, c.name, c.label...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.label, got, c.want)
		}
	}
}

// The lag gauges rise while delivery is stopped and writes continue, and fall back to zero when
// it resumes.
func TestLagGaugesRiseAndFall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.start(func(c *Config) { c.StatusInterval = 200 * time.Millisecond; c.RequestTimeout = time.Minute })
	e.recv.Hang()
	res := e.produce(relaytest.Workload{Events: 200, Aggregates: 5, MaxTxSize: 5})
	waitFor(t, 10*time.Second, "lag rises", func() bool {
		return r.metric(t, "outbox_relay_replication_lag_bytes") > 0 && r.metric(t, "outbox_relay_oldest_undelivered_seconds") >= 1
	})
	e.recv.Unhang()
	requireOK(t, e.waitDelivered(res, 30*time.Second))
	waitFor(t, 15*time.Second, "lag falls back", func() bool {
		return r.metric(t, "outbox_relay_replication_lag_bytes") == 0 && r.metric(t, "outbox_relay_oldest_undelivered_seconds") == 0
	})
}

// The logs of a failing run never show the signing secret, a signature or the DSN's password.
func TestLogsNeverShowSecrets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var logs relaytest.SyncBuffer
	e.recv.SetFail(func(*http.Request) int { return http.StatusInternalServerError })
	const marker = "s3cr3t-Signing-Key"
	r := e.start(func(c *Config) {
		c.Secrets = []string{marker}
		c.Logger = zerolog.New(&logs).Level(zerolog.DebugLevel)
		c.MaxAttempts = 2
	})
	e.recv.Secret = marker
	e.produce(relaytest.Workload{Events: 20, Aggregates: 2, MaxTxSize: 2})
	waitFor(t, 15*time.Second, "dead letters", func() bool { return r.metric(t, "outbox_relay_events_dead_lettered_total") >= 1 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "delivery failed") {
		t.Fatal("captured no failure logs; the check below would prove nothing")
	}
	for _, leak := range []string{marker, "sha256=", "X-Signature"} {
		if strings.Contains(out, leak) {
			t.Fatalf("logs contain %q", leak)
		}
	}
}
