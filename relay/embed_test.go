package relay

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// New takes one form of Config: a default-pipeline field beside Pipelines would apply to no
// pipeline, so it is refused, naming the field; either form alone is accepted (the controls).
func TestNewRefusesTheTwoFormsMixed(t *testing.T) {
	t.Parallel()
	pipes := []Pipeline{{Name: "orders", WebhookURL: "https://consumer.example/hook", Secrets: []string{"s"}}}
	base := Config{DSN: "postgres://relay@localhost/app"}
	for _, tc := range []struct {
		name  string
		mix   func(*Config)
		field string // "" when New accepts it
	}{
		{"pipelines alone", func(*Config) {}, ""},
		{"process fields beside pipelines", func(c *Config) { c.ShutdownTimeout, c.Retention = time.Second, time.Hour }, ""},
		{"webhook url", func(c *Config) { c.WebhookURL = "https://other.example/hook" }, "WebhookURL"},
		{"slot", func(c *Config) { c.Slot = "mine" }, "Slot"},
		{"max attempts", func(c *Config) { c.MaxAttempts = 3 }, "MaxAttempts"},
		{"batch linger", func(c *Config) { c.Delivery.Batch.Linger = time.Second }, "Delivery"},
		{"shards", func(c *Config) { c.Shards = 4 }, "Shards"},
		{"destination", func(c *Config) { c.Destination = destination.Opened(nil) }, "Destination"},
		{"on gone", func(c *Config) { c.Control.OnGone = publisher.GoneRetry }, "Control.OnGone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.Pipelines = pipes
			tc.mix(&cfg)
			_, err := New(cfg)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("New refused %s: %v", tc.name, err)
				}
				return
			}
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.field+" is a setting of the default pipeline") {
				t.Fatalf("New = %v, want ErrConfig naming %s", err, tc.field)
			}
		})
	}
	t.Run("flat fields alone", func(t *testing.T) {
		cfg := base
		cfg.WebhookURL, cfg.Secrets, cfg.Slot, cfg.Shards = "https://consumer.example/hook", []string{"s"}, "mine", 4
		if _, err := New(cfg); err != nil {
			t.Fatalf("New refused the flag form: %v", err)
		}
	})
	t.Run("registerer that is no gatherer", func(t *testing.T) {
		cfg := base
		cfg.Pipelines = pipes
		cfg.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"app": "x"}, prometheus.NewRegistry())
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Fatalf("New = %v, want ErrConfig asking for the Gatherer", err)
		}
	})
}

// recorder is a program's own destination: it keeps what it accepted, and refuses the first
// attempt of every event, so that the relay's retries are what delivers.
type recorder struct {
	mu   sync.Mutex
	got  []relaytest.Delivery
	seen map[string]bool
}

func (r *recorder) Send(_ context.Context, m *envelope.Message, attempt int) destination.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.seen[m.ID] {
		r.seen[m.ID] = true
		return destination.Result{Err: errors.New("first attempt refused"), Label: destination.ResultNetwork}
	}
	var p struct{ Seq int }
	_ = json.Unmarshal(m.Payload, &p)
	r.got = append(r.got, relaytest.Delivery{ID: m.ID, Aggregate: m.AggregateType + "/" + m.AggregateID, Seq: p.Seq,
		Attempt: attempt, Sequence: m.Sequence})
	return destination.Result{Delivered: true, Label: destination.ResultSuccess}
}

func (r *recorder) deliveries() []relaytest.Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]relaytest.Delivery(nil), r.got...)
}

// A program embeds the relay with its own destination, its own registry (that already holds a
// Go collector) and its own mux: every event reaches the destination in order per aggregate
// after a retry, its rows are marked done, and the program's mux answers /readyz and serves the
// relay's series from the program's registry.
func TestEmbeddedRelayWithItsOwnDestinationAndMux(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	dest := &recorder{seen: map[string]bool{}}
	cfg := e.config()
	cfg.WebhookURL, cfg.Secrets = "", nil
	cfg.Destination = destination.Opened(dest)
	cfg.Registerer = reg
	rl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/outbox/", http.StripPrefix("/outbox", rl.Handler()))
	app := httptest.NewServer(mux)
	defer app.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(app.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/outbox/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/outbox/readyz before Run = %d %q, want 503", code, body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v after the stop, want nil", err)
		}
	}()
	waitFor(t, 30*time.Second, "/outbox/readyz 200", func() bool { code, _ := get("/outbox/readyz"); return code == http.StatusOK })
	res := e.produce(relaytest.Workload{Events: 200, Aggregates: 10, MaxTxSize: 5})
	var rep relaytest.Report
	waitFor(t, 60*time.Second, "every event delivered to the program's destination", func() bool {
		rep = relaytest.Check(res, dest.deliveries())
		return len(rep.Lost) == 0
	})
	if !rep.OK() {
		t.Fatalf("delivered %d of %d: phantoms %v, order violations %v", rep.Delivered, rep.Committed, rep.Phantoms, rep.OrderViolations)
	}
	for _, d := range dest.deliveries() {
		if d.Attempt < 2 {
			t.Fatalf("%s accepted at attempt %d: the first attempt was refused, so the relay must have retried", d.ID, d.Attempt)
		}
	}
	last := res.Committed[len(res.Committed)-1].ID
	waitFor(t, 30*time.Second, "rows marked done", func() bool { return e.status(last) == "done" })
	_, metrics := get("/outbox/metrics")
	for _, series := range []string{`outbox_relay_events_delivered_total{pipeline="default"} 200`, "go_goroutines"} {
		if !strings.Contains(metrics, series) {
			t.Fatalf("/outbox/metrics lacks %s", series)
		}
	}
}
