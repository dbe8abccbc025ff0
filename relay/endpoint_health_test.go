package relay

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/signature"
)

const operatorSecret = "operator-secret-0123456789"

// operatorEvents is the operator's receiver: it keeps every event whose X-Signature verifies
// with operatorSecret, and counts the others.
type operatorEvents struct {
	srv      *httptest.Server
	mu       sync.Mutex
	events   []operatorEvent
	unsigned atomic.Int64
}

func newOperatorEvents(t *testing.T) *operatorEvents {
	o := &operatorEvents{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		// How an operator verifies it (docs/guides/endpoints.md): HMAC-SHA256 over the
		// X-Timestamp value then the body, with the secret's bytes as the key.
		ts := r.Header.Get("X-Timestamp")
		if !signature.VerifyX([][]byte{[]byte(operatorSecret)}, ts, body, r.Header.Values("X-Signature")...) {
			o.unsigned.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var ev operatorEvent
		if err := json.Unmarshal(body, &ev); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		o.events = append(o.events, ev)
		o.mu.Unlock()
	}))
	t.Cleanup(o.srv.Close)
	return o
}

// of returns the events of type typ about endpoint id.
func (o *operatorEvents) of(typ, id string) []operatorEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []operatorEvent
	for _, ev := range o.events {
		if ev.Type == typ && ev.Data.Endpoint == id {
			out = append(out, ev)
		}
	}
	return out
}

func (o *operatorEvents) configure(cfg *Config) {
	cfg.OperatorWebhookURL, cfg.OperatorWebhookSecret = o.srv.URL, operatorSecret
}

// An endpoint that fails every attempt for endpoint_disable_after is disabled by the relay, its
// row saying for how long and with which error; the others keep delivering, and the operator's
// webhook gets a signed endpoint.disabled.
func TestEndpointDisabledAfterFailingForDisableAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	down := newPartner(t, "down", func(string, string, string) bool { return true })
	up := newPartner(t, "up", func(string, string, string) bool { return true })
	e.addPartner(down, endpoints.Endpoint{})
	e.addPartner(up, endpoints.Endpoint{})
	down.recv.SetFail(func(*http.Request) int { return http.StatusBadGateway })
	op := newOperatorEvents(t)
	r := e.start(func(cfg *Config) {
		endpointsConfig(cfg)
		cfg.MaxAttempts, cfg.EndpointDisableAfter = -1, 2*time.Second
		op.configure(cfg)
	})
	e.write("a", tenantEvents{"", "order", "order.created", 5, 2}, []*partner{up})
	waitFor(t, time.Minute, "the failing endpoint disabled", func() bool {
		ep, err := endpoints.Store{}.Get(context.Background(), e.pool, "down")
		return err == nil && ep.State == endpoints.Disabled
	})
	ep, err := endpoints.Store{}.Get(context.Background(), e.pool, "down")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ep.DisabledReason, "failing for") || !strings.Contains(ep.DisabledReason, "502") {
		t.Fatalf("disabled reason %q: it names neither how long nor the last error", ep.DisabledReason)
	}
	e.write("b", tenantEvents{"", "order", "order.created", 5, 2}, []*partner{up})
	waitPartners(t, up)
	waitFor(t, 30*time.Second, "endpoint.disabled at the operator's webhook", func() bool {
		return len(op.of("endpoint.disabled", "down")) == 1
	})
	ev := op.of("endpoint.disabled", "down")[0]
	if ev.ID == "" || ev.Data.Pipeline != DefaultPipeline || ev.Data.Reason != ep.DisabledReason ||
		!strings.Contains(ev.Data.LastError, "502") || ev.Data.FailingSince == nil || ev.Data.DisabledAt == nil {
		t.Fatalf("endpoint.disabled %+v: want the id, pipeline, reason %q, the last error, failing_since, disabled_at", ev, ep.DisabledReason)
	}
	if n := op.unsigned.Load(); n > 0 {
		t.Fatalf("%d operator requests did not verify", n)
	}
	if len(op.of("endpoint.disabled", "up")) > 0 {
		t.Fatal("the endpoint that delivers was reported disabled")
	}
	if n := r.metric(t, "outbox_relay_endpoint_transitions_total", "transition", "disabled"); n != 1 {
		t.Fatalf("disabled transitions = %v, want 1", n)
	}
}

// An endpoint that fails ten times and more, opening its breaker, then delivers again: the
// operator's webhook gets endpoint.recovered, with when it began failing and how many failed.
func TestEndpointRecoveredIsReportedToTheOperator(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	flaky := newPartner(t, "flaky", func(string, string, string) bool { return true })
	e.addPartner(flaky, endpoints.Endpoint{})
	var failures atomic.Int64
	flaky.recv.SetFail(func(*http.Request) int {
		if failures.Add(1) <= 12 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	op := newOperatorEvents(t)
	r := e.start(func(cfg *Config) { endpointsConfig(cfg); cfg.MaxAttempts = -1; op.configure(cfg) })
	e.write("r", tenantEvents{"", "order", "order.created", 3, 2}, []*partner{flaky})
	waitPartners(t, flaky)
	waitFor(t, 30*time.Second, "endpoint.recovered at the operator's webhook", func() bool {
		return len(op.of("endpoint.recovered", "flaky")) == 1
	})
	ev := op.of("endpoint.recovered", "flaky")[0]
	if ev.Data.Failures < 10 || ev.Data.FailingSince == nil || ev.Data.RecoveredAt == nil || ev.Data.RecoveredAt.Before(*ev.Data.FailingSince) {
		t.Fatalf("endpoint.recovered %+v: want failures >= 10, failing_since before recovered_at", ev.Data)
	}
	for _, tr := range []string{"circuit_opened", "recovered"} {
		if n := r.metric(t, "outbox_relay_endpoint_transitions_total", "transition", tr); n != 1 {
			t.Fatalf("%s transitions = %v, want 1", tr, n)
		}
	}
	if ep, err := (endpoints.Store{}).Get(context.Background(), e.pool, "flaky"); err != nil || ep.State != endpoints.Enabled {
		t.Fatalf("the endpoint that recovered: %+v, %v; want it enabled", ep, err)
	}
}

// When an endpoint began failing is kept across a restart: the relay that starts again disables
// it counting from then (its reason and event name the time from before the restart), not from
// its own start.
func TestEndpointFailingSinceSurvivesARestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	down := newPartner(t, "down", func(string, string, string) bool { return true })
	e.addPartner(down, endpoints.Endpoint{})
	down.recv.SetFail(func(*http.Request) int { return http.StatusBadGateway })
	op := newOperatorEvents(t)
	configure := func(after time.Duration) func(*Config) {
		return func(cfg *Config) {
			endpointsConfig(cfg)
			cfg.MaxAttempts, cfg.EndpointDisableAfter = -1, after
			op.configure(cfg)
		}
	}
	r := e.start(configure(time.Hour))
	e.write("s", tenantEvents{"", "order", "order.created", 2, 1}, nil)
	var since time.Time
	waitFor(t, time.Minute, "failing_since saved", func() bool {
		var at *time.Time
		err := e.pool.QueryRow(context.Background(), `SELECT failing_since FROM outbox_endpoint_status
			WHERE endpoint_id = 'down'`).Scan(&at)
		if err == nil && at != nil {
			since = *at
		}
		return err == nil && at != nil
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	// Started again with a limit already passed since the failures began: counted from the
	// restart instead, the endpoint would be disabled naming a later failing_since.
	after := time.Since(since) + time.Second
	time.Sleep(time.Until(since.Add(after)) + 100*time.Millisecond)
	e.start(configure(after))
	waitFor(t, time.Minute, "endpoint.disabled at the operator's webhook", func() bool {
		return len(op.of("endpoint.disabled", "down")) == 1
	})
	ev := op.of("endpoint.disabled", "down")[0]
	if ev.Data.FailingSince == nil || !ev.Data.FailingSince.Equal(since) {
		t.Fatalf("endpoint.disabled failing_since %v, want %v, the one saved before the restart", ev.Data.FailingSince, since)
	}
	ep, err := endpoints.Store{}.Get(context.Background(), e.pool, "down")
	if err != nil || ep.State != endpoints.Disabled || !strings.Contains(ep.DisabledReason, since.UTC().Format(time.RFC3339)) {
		t.Fatalf("endpoint %+v, %v: want it disabled, its reason naming %s", ep, err, since.UTC().Format(time.RFC3339))
	}
}

// An endpoint that answers 410 Gone is disabled at once, as before, and the relay that got the
// 410 tells the operator's webhook with endpoint.disabled.
func TestEndpointGoneIsReportedToTheOperator(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gone := newPartner(t, "gone", func(string, string, string) bool { return true })
	e.addPartner(gone, endpoints.Endpoint{})
	gone.recv.SetFail(func(*http.Request) int { return http.StatusGone })
	op := newOperatorEvents(t)
	r := e.start(func(cfg *Config) { endpointsConfig(cfg); op.configure(cfg) })
	e.write("g", tenantEvents{"", "order", "order.created", 1, 1}, nil)
	waitFor(t, 30*time.Second, "endpoint.disabled at the operator's webhook", func() bool {
		return len(op.of("endpoint.disabled", "gone")) == 1
	})
	ev := op.of("endpoint.disabled", "gone")[0]
	if !strings.Contains(ev.Data.Reason, "410") || ev.Data.DisabledAt == nil {
		t.Fatalf("endpoint.disabled %+v: want the 410 in its reason, and disabled_at", ev.Data)
	}
	if n := r.metric(t, "outbox_relay_endpoint_transitions_total", "transition", "disabled"); n != 1 {
		t.Fatalf("disabled transitions = %v, want 1", n)
	}
}

// The operator's webhook needs an absolute http(s) URL and a secret; New refuses a half.
func TestOperatorWebhookSettingsAreChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, secret, want string }{
		{"", "s3cret", "without its URL"},
		{"http://ops.example/hook", "", "needs a signing secret"},
		{"ops.example/hook", "s3cret", "absolute http(s) URL"},
	} {
		cfg := Config{OperatorWebhookURL: c.url, OperatorWebhookSecret: c.secret}
		if err := cfg.validateOperator(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("url %q secret %q: %v, want an error saying %q", c.url, c.secret, err, c.want)
		}
	}
	if err := (&Config{OperatorWebhookURL: "https://ops.example/hook", OperatorWebhookSecret: "s3cret"}).validateOperator(); err != nil {
		t.Fatal(err)
	}
}
