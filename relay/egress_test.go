package relay

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// hostURL is a receiver's URL with its host replaced by name (which the test's resolver maps to
// the receiver's address).
func hostURL(t *testing.T, raw, name string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = name + ":" + u.Port()
	return u.String()
}

// lastError is the endpoint's last_error in its status, once saved.
func (e *env) lastError(id string) string {
	var s string
	_ = e.pool.QueryRow(context.Background(), `SELECT coalesce(last_error, '') FROM outbox_endpoint_status WHERE endpoint_id = $1`, id).Scan(&s)
	return s
}

// The DNS-rebinding shape, end to end: a tenant's endpoint (deny_private) at a name that is
// accepted when it is written (no lookup then) and resolves to loopback when the relay connects
// is never reached, its attempts failing with the guard's reason; an operator's endpoint at a
// name resolving to the same address is reached (the positive control). Under
// --egress-deny-private the operator's is refused too, and --egress-allow admits it again.
func TestEgressGuardAtDialTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tenant := newPartner(t, "tenant", func(string, string, string) bool { return true })
	op := newPartner(t, "op", func(string, string, string) bool { return true })
	dns := relaytest.FakeDNS(map[string]string{"tenant.partner.test": "127.0.0.1", "op.partner.test": "127.0.0.1"})
	for _, p := range []struct {
		p    *partner
		deny bool
	}{{tenant, true}, {op, false}} {
		ep := endpoints.Endpoint{ID: p.p.id, URL: hostURL(t, p.p.recv.URL, p.p.id+".partner.test"), Secret: "secret-of-" + p.p.id + "-0123456789",
			DenyPrivate: p.deny}
		if _, err := (endpoints.Store{}).Add(ctx, e.pool, ep); err != nil {
			t.Fatalf("add %s: %v (a name is accepted when written: it is looked up at each connection)", p.p.id, err)
		}
	}
	r := e.start(func(cfg *Config) { endpointsConfig(cfg); cfg.Resolver = dns; cfg.MaxAttempts = -1 })
	e.write("a", tenantEvents{"", "order", "order.created", 2, 2}, []*partner{op})
	waitPartners(t, op)
	waitFor(t, 30*time.Second, "the tenant's endpoint failing with the guard's reason", func() bool {
		return strings.Contains(e.lastError("tenant"), "127.0.0.1 is loopback")
	})
	if n := tenant.recv.Requests(); n != 0 {
		t.Fatalf("the tenant's endpoint was reached %d times", n)
	}
	r.stop(t)

	_, err := e.pool.Exec(ctx, `DELETE FROM outbox_endpoint_status`)
	if err != nil {
		t.Fatal(err)
	}
	r = e.start(func(cfg *Config) {
		endpointsConfig(cfg)
		cfg.Resolver, cfg.MaxAttempts, cfg.Egress = dns, -1, endpoints.Egress{DenyPrivate: true}
	})
	e.write("b", tenantEvents{"", "order", "order.created", 1, 1}, nil)
	waitFor(t, 30*time.Second, "the operator's endpoint refused under --egress-deny-private", func() bool {
		return strings.Contains(e.lastError("op"), "127.0.0.1 is loopback")
	})
	r.stop(t)
}

// A failure of the egress proxy is not the endpoint's: while the proxy refuses the relay (407:
// it lacks the credentials), the endpoint's attempts fail, are logged, and retried, but its
// failures in a row stay 0 and it is not disabled, while an endpoint whose own server fails
// beside it is disabled after the same time (the positive control). Given the credentials in
// --egress-proxy, it delivers everything, in order, through the proxy.
func TestEgressProxyFailureIsNotCountedAgainstTheEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	viaProxy := newPartner(t, "proxied", func(string, string, string) bool { return true })
	failing := newPartner(t, "failing", func(string, string, string) bool { return true })
	e.addPartner(viaProxy, endpoints.Endpoint{})
	e.addPartner(failing, endpoints.Endpoint{EgressProxy: "direct"})
	failing.recv.SetFail(func(*http.Request) int { return http.StatusBadGateway })
	proxy := relaytest.NewConnectProxy()
	defer proxy.Close()
	proxy.SetAuth("Basic " + base64.StdEncoding.EncodeToString([]byte("relay:pw")))
	start := func(proxyURL string) *running {
		return e.start(func(cfg *Config) {
			endpointsConfig(cfg)
			cfg.MaxAttempts, cfg.EndpointDisableAfter, cfg.EgressProxy = -1, 2*time.Second, proxyURL
		})
	}
	r := start(proxy.URL)
	e.write("a", tenantEvents{"", "order", "order.created", 3, 2}, []*partner{viaProxy})
	waitFor(t, time.Minute, "the failing endpoint disabled", func() bool {
		ep, err := endpoints.Store{}.Get(ctx, e.pool, "failing")
		return err == nil && ep.State == endpoints.Disabled
	})
	var attempts int
	var span time.Duration
	waitFor(t, 30*time.Second, "proxy failures logged over more than the disable time", func() bool {
		_ = e.pool.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM max(at) - min(at)), 0) * interval '1 second'
			FROM outbox_delivery_attempts WHERE endpoint_id = 'proxied' AND error LIKE 'proxy: %407%'`).Scan(&attempts, &span)
		return attempts >= 3 && span > 3*time.Second
	})
	r.stop(t) // its status is saved at the stop
	ep, err := endpoints.Store{}.Get(ctx, e.pool, "proxied")
	if err != nil || ep.State != endpoints.Enabled {
		t.Fatalf("the endpoint behind a failing proxy: %+v, %v; want it enabled", ep, err)
	}
	var failures int
	if err := e.pool.QueryRow(ctx, `SELECT failures_in_row FROM outbox_endpoint_status WHERE endpoint_id = 'proxied'`).Scan(&failures); err != nil || failures != 0 {
		t.Fatalf("failures in a row of the endpoint behind the proxy: %d, %v; want 0", failures, err)
	}
	if viaProxy.recv.Requests() != 0 {
		t.Fatal("the endpoint was reached while the proxy refused")
	}
	start(strings.Replace(proxy.URL, "http://", "http://relay:pw@", 1))
	waitPartners(t, viaProxy)
	if len(proxy.Targets()) == 0 {
		t.Fatal("the deliveries did not go through the proxy")
	}
}
