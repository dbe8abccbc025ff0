package api_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// doneEvent writes an event of tenant and marks it delivered, as the relay would, and returns
// its id.
func (e *env) doneEvent(tenant, evType string) string {
	e.t.Helper()
	ctx := context.Background()
	id, err := outbox.Enqueue(ctx, e.pool, outbox.Event{AggregateType: "order", AggregateID: "o-" + tenant, EventType: evType,
		TenantID: tenant, Payload: map[string]int{"n": 1}})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE outbox_events SET status = 'done', processed_at = now() WHERE id = $1`, id); err != nil {
		e.t.Fatal(err)
	}
	return id.String()
}

// tampered changes one character of a token's signature.
func tampered(tok string) string {
	i := strings.LastIndex(tok, ".") + 3
	c := byte('A')
	if tok[i] == 'A' {
		c = 'B'
	}
	return tok[:i] + string(c) + tok[i+1:]
}

// Every route is tried with another tenant's token (404, never 403: nothing says the object
// exists), an expired token, a tampered one, one signed with an unknown key, one for another
// audience, and none (401, nothing else said); the owner's token on the same request is the
// positive control, answered by the route itself.
func TestTenantIsolationOnEveryRoute(t *testing.T) {
	resolver := relaytest.FakeDNS(map[string]string{"acme.example": "127.0.0.1"})
	e := newEnv(t, func(c *api.Config) { c.Resolver = resolver })
	acme, globex := e.tenant("acme"), e.tenant("globex")
	created := e.must(201, "POST", "/api/v1/endpoints", acme, map[string]any{"id": "acme-ep", "url": "https://acme.example/hooks"})
	if created["tenant_id"] != "acme" || created["deny_private"] != true {
		t.Fatalf("a tenant's endpoint: %v, want tenant acme and deny_private", created)
	}
	e.must(201, "POST", "/api/v1/endpoints", opToken, map[string]any{"id": "globex-ep", "url": "https://globex.example/",
		"tenant_id": "globex"})
	acmeEvent, globexEvent := e.doneEvent("acme", "order.created"), e.doneEvent("globex", "order.created")
	// A test attempt puts an entry in the log; acme.example resolves to loopback, which the
	// guard refuses at dial time for a tenant's endpoint.
	res := e.must(200, "POST", "/api/v1/endpoints/acme-ep/test", acme, nil)
	if res["delivered"] != false || !strings.Contains(fmt.Sprint(res["error"]), "loopback") {
		t.Fatalf("a test to a name resolving to 127.0.0.1: %v, want refused at dial time", res)
	}
	testEvent := res["event_id"].(string)
	reqID := e.must(202, "POST", "/api/v1/endpoints/acme-ep/recover", acme,
		map[string]any{"since": time.Now().Add(-time.Hour).Format(time.RFC3339)})["id"]
	e.must(201, "PUT", "/api/v1/event-types/order.created", opToken, map[string]any{"description": "an order was placed"})

	expired, err := e.keys.Mint(api.Token{Tenant: "acme", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	otherKeys, _ := api.ParseKeys(otherKey)
	unknownKey, _ := otherKeys.Mint(api.Token{Tenant: "acme", TTL: time.Hour})
	portal, _ := e.keys.Mint(api.Token{Tenant: "acme", TTL: time.Hour, Audience: api.AudiencePortal})
	noneAlg := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"acme","iss":"outbox-relay","aud":["outbox-relay-api"],"exp":4102444800}`)) + "."
	deadline := time.Now().Add(1100 * time.Millisecond)
	routes := []struct {
		method, path string
		body         any
		owner        int // the owner's answer
		other        int // another tenant's
	}{
		{"GET", "/api/v1/endpoints/acme-ep", nil, 200, 404},
		{"PATCH", "/api/v1/endpoints/acme-ep", map[string]any{"description": "x"}, 200, 404},
		{"POST", "/api/v1/endpoints/acme-ep/pause", nil, 200, 404},
		{"POST", "/api/v1/endpoints/acme-ep/resume", nil, 200, 404},
		{"POST", "/api/v1/endpoints/acme-ep/disable", nil, 200, 404},
		{"POST", "/api/v1/endpoints/acme-ep/enable", nil, 200, 404},
		{"POST", "/api/v1/endpoints/acme-ep/rotate-secret", nil, 200, 404},
		{"POST", "/api/v1/endpoints/acme-ep/test", nil, 200, 404},
		{"POST", "/api/v1/endpoints/acme-ep/recover", map[string]any{"since": time.Now().Add(-time.Hour).Format(time.RFC3339)}, 202, 404},
		{"POST", "/api/v1/endpoints/acme-ep/events/" + acmeEvent + "/resend", nil, 202, 404},
		{"GET", "/api/v1/endpoints/acme-ep/events/" + acmeEvent, nil, 200, 404},
		{"GET", "/api/v1/endpoints/acme-ep/deliveries", nil, 200, 404},
		{"GET", "/api/v1/endpoints/acme-ep/stats", nil, 200, 404},
		{"GET", "/api/v1/events/" + testEvent + "/deliveries", nil, 200, 404},
		{"GET", fmt.Sprintf("/api/v1/requests/%v", reqID), nil, 200, 404},
		{"GET", "/api/v1/endpoints", nil, 200, 200},
		{"GET", "/api/v1/audit", nil, 200, 200},
		{"GET", "/api/v1/event-types", nil, 200, 200},
		{"GET", "/api/v1/event-types/order.created", nil, 200, 200},
		{"PUT", "/api/v1/event-types/order.created", map[string]any{"description": "y"}, 403, 403},
		{"DELETE", "/api/v1/event-types/order.created", nil, 403, 403},
		{"POST", "/api/v1/endpoints", map[string]any{"url": "https://new.example/"}, 201, 201},
		{"DELETE", "/api/v1/endpoints/acme-ep", nil, 200, 404},
	}
	time.Sleep(time.Until(deadline)) // the one-second token has expired
	for _, r := range routes {
		t.Run(r.method+" "+r.path, func(t *testing.T) {
			if a := e.do(r.method, r.path, globex, r.body); a.status != r.other {
				t.Fatalf("another tenant: %d %s, want %d", a.status, a.body, r.other)
			}
			for name, tok := range map[string]string{"expired": expired, "tampered": tampered(acme), "unknown key": unknownKey,
				"portal audience": portal, "alg none": noneAlg, "none": "", "garbage": "not-a-token"} {
				a := e.do(r.method, r.path, tok, r.body)
				if a.status != 401 || strings.Contains(string(a.body), "detail") {
					t.Fatalf("%s token: %d %s, want 401 saying nothing", name, a.status, a.body)
				}
			}
			if a := e.do(r.method, r.path, acme, r.body); a.status != r.owner {
				t.Fatalf("the owner: %d %s, want %d", a.status, a.body, r.owner)
			}
		})
	}
	// What globex listed and read holds nothing of acme.
	for _, path := range []string{"/api/v1/endpoints", "/api/v1/audit"} {
		if a := e.do("GET", path, globex, nil); strings.Contains(string(a.body), "acme") {
			t.Fatalf("globex's %s shows acme's: %s", path, a.body)
		}
	}
	// A tenant cannot resend another tenant's event to its own endpoint.
	e.must(201, "POST", "/api/v1/endpoints", acme, map[string]any{"id": "acme-2", "url": "https://acme.example/3"})
	e.must(404, "POST", "/api/v1/endpoints/acme-2/events/"+globexEvent+"/resend", acme, nil)
	e.must(202, "POST", "/api/v1/endpoints/acme-2/events/"+acmeEvent+"/resend", acme, nil)
	// ... nor read it as its endpoint would receive it.
	e.must(404, "GET", "/api/v1/endpoints/acme-2/events/"+globexEvent, acme, nil)
	req := e.must(200, "GET", "/api/v1/endpoints/acme-2/events/"+acmeEvent, acme, nil)
	signatures := 0
	for _, h := range req["headers"].([]any) {
		h := h.(map[string]any)
		if name := h["name"].(string); strings.HasSuffix(name, "Signature") {
			signatures++
			if h["value"] != api.SignatureHidden {
				t.Fatalf("the request shows %s: %v", name, h["value"])
			}
		}
	}
	if signatures != 1 {
		t.Fatalf("the request has %d signature headers, want 1: %v", signatures, req["headers"])
	}
	// A request's counts are of the pipeline's rows in the range, every tenant's: a tenant
	// gets none of them (they would tell globex's volume), an operator gets them.
	recovered := e.must(202, "POST", "/api/v1/endpoints/acme-2/recover", acme,
		map[string]any{"since": time.Now().Add(-time.Hour).Format(time.RFC3339)})
	path := fmt.Sprintf("/api/v1/requests/%v", recovered["id"])
	for _, a := range []map[string]any{recovered, e.must(200, "GET", path, acme, nil)} {
		if a["events"] != nil || a["sent"] != nil {
			t.Fatalf("a tenant's request shows the range's counts: %v", a)
		}
	}
	// Whether there is anything to recover is the endpoint's business, not the range's: an
	// endpoint that subscribes to nothing written there gets 422 though globex wrote there.
	e.must(201, "POST", "/api/v1/endpoints", acme, map[string]any{"id": "acme-3", "url": "https://acme.example/4",
		"aggregate_types": []string{"invoice"}})
	e.must(422, "POST", "/api/v1/endpoints/acme-3/recover", acme,
		map[string]any{"since": time.Now().Add(-time.Hour).Format(time.RFC3339)})
	if op := e.must(200, "GET", path, opToken, nil); op["events"] != float64(2) {
		t.Fatalf("an operator's view of the request: %v, want events 2 (acme's row and globex's)", op)
	}
}

// A tenant cannot set another tenant, lift the URL guard, set a proxy, or give a private
// address; an operator can do what the tenant cannot (the positive control).
func TestTenantRules(t *testing.T) {
	e := newEnv(t)
	acme := e.tenant("acme")
	for _, tt := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"another tenant", map[string]any{"url": "https://a.example/", "tenant_id": "globex"}, "tenant_id"},
		{"no tenant", map[string]any{"url": "https://a.example/", "tenant_id": nil}, "tenant_id"},
		{"lift the guard", map[string]any{"url": "https://a.example/", "allow_private_url": true}, "allow_private_url"},
		{"a proxy", map[string]any{"url": "https://a.example/", "egress_proxy": "http://proxy.internal:3128"}, "egress_proxy"},
		{"loopback", map[string]any{"url": "http://127.0.0.1:8080/"}, "url"},
		{"private", map[string]any{"url": "http://10.1.2.3/"}, "url"},
		{"CGNAT", map[string]any{"url": "http://100.64.0.1/"}, "url"},
		{"metadata", map[string]any{"url": "http://169.254.169.254/latest/meta-data/"}, "url"},
		{"an odd loopback", map[string]any{"url": "http://0x7f.1/"}, "url"},
		{"IPv6 unique local", map[string]any{"url": "http://[fc00::1]/"}, "url"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := e.do("POST", "/api/v1/endpoints", acme, tt.body)
			p := a.json(t)
			errs, _ := p["errors"].([]any)
			if a.status != 422 || len(errs) == 0 || errs[0].(map[string]any)["field"] != tt.field {
				t.Fatalf("%d %s, want 422 naming %s", a.status, a.body, tt.field)
			}
		})
	}
	e.must(201, "POST", "/api/v1/endpoints", opToken, map[string]any{"id": "internal", "url": "http://10.1.2.3/", "tenant_id": "acme"})
	// The tenant changes it: its URL is then the tenant's, and the guard refuses it.
	a := e.do("PATCH", "/api/v1/endpoints/internal", acme, map[string]any{"description": "mine"})
	if a.status != 422 || !strings.Contains(string(a.body), `"url"`) {
		t.Fatalf("a tenant's change of an endpoint at a private address: %d %s, want 422 on url", a.status, a.body)
	}
	// --egress-allow admits an internal partner's range, for tenants too.
	allowing := newEnv(t, func(c *api.Config) { c.Egress.Allow = []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")} })
	allowing.must(201, "POST", "/api/v1/endpoints", allowing.tenant("acme"), map[string]any{"url": "http://10.1.2.3/"})
}

// An application that authenticates its users itself mounts the API with its own resolver:
// its session (here a header its own middleware would set) decides the tenant, with a tenant
// token's scoping; without a session the bearer token decides, so operators still get in.
func TestTenantResolverScopesLikeAToken(t *testing.T) {
	e := newEnv(t, func(c *api.Config) {
		c.TenantResolver = func(r *http.Request) (string, bool) {
			tenant := r.Header.Get("X-Session-Tenant")
			return tenant, tenant != ""
		}
	})
	e.must(201, "POST", "/api/v1/endpoints", opToken, map[string]any{"id": "globex-ep", "url": "https://globex.example/",
		"tenant_id": "globex"})
	created := e.must(201, "POST", "/api/v1/endpoints", "", map[string]any{"id": "acme-ep", "url": "https://acme.example/"},
		"X-Session-Tenant", "acme")
	if created["tenant_id"] != "acme" || created["deny_private"] != true {
		t.Fatalf("an endpoint created in acme's session: %v", created)
	}
	e.must(404, "GET", "/api/v1/endpoints/globex-ep", "", nil, "X-Session-Tenant", "acme")
	e.must(200, "GET", "/api/v1/endpoints/globex-ep", "", nil, "X-Session-Tenant", "globex")
	e.must(401, "GET", "/api/v1/endpoints/acme-ep", "", nil)
	audit := e.must(200, "GET", "/api/v1/audit", opToken, nil)["data"].([]any)
	if r := audit[0].(map[string]any); r["actor_kind"] != "tenant" || r["actor"] != "acme" {
		t.Fatalf("the audit of a change in acme's session: %v", r)
	}
}
