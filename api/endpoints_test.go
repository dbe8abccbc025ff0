package api_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/endpoints"
)

func fingerprint(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:4])
}

// An operator creates, reads, lists, changes, pauses, resumes, disables, enables, rotates and
// removes an endpoint; every change is in the audit list, newest first, naming the operator.
func TestEndpointLifecycle(t *testing.T) {
	e := newEnv(t)
	created := e.must(201, "POST", "/api/v1/endpoints", opToken, map[string]any{"id": "acme", "url": "https://acme.example/hooks",
		"tenant_id": "acme", "event_types": []string{"order.*"}, "description": "Acme's orders", "metadata": map[string]any{"plan": "pro"}})
	secret, _ := created["secret"].(string)
	if len(secret) < 40 || created["description"] != "Acme's orders" || created["state"] != "enabled" {
		t.Fatalf("create answered %v", created)
	}
	got := e.must(200, "GET", "/api/v1/endpoints/acme", opToken, nil)
	if _, ok := got["secret"]; ok {
		t.Fatalf("a read shows the secret: %v", got)
	}
	secrets := got["secrets"].([]any)
	if fp := secrets[0].(map[string]any)["fingerprint"]; fp != fingerprint(secret) {
		t.Fatalf("fingerprint %v, want %s (the partner's sha256 of the secret given once)", fp, fingerprint(secret))
	}
	if sealed := secrets[0].(map[string]any)["sealed"]; sealed != true {
		t.Fatalf("the secret is not sealed with the API's secrets key: %v", secrets[0])
	}
	for _, id := range []string{"b-ep", "c-ep"} {
		e.must(201, "POST", "/api/v1/endpoints", opToken, map[string]any{"id": id, "url": "https://" + id + ".example/"})
	}
	first := e.must(200, "GET", "/api/v1/endpoints?limit=2", opToken, nil)
	if len(first["data"].([]any)) != 2 || first["next_cursor"] == nil {
		t.Fatalf("first page: %v", first)
	}
	second := e.must(200, "GET", "/api/v1/endpoints?limit=2&cursor="+first["next_cursor"].(string), opToken, nil)
	if data := second["data"].([]any); len(data) != 1 || data[0].(map[string]any)["id"] != "c-ep" || second["next_cursor"] != nil {
		t.Fatalf("second page: %v", second)
	}
	upd := e.must(200, "PATCH", "/api/v1/endpoints/acme", opToken, map[string]any{"url": "https://acme.example/v2", "rate_limit": 50,
		"description": nil})
	if upd["url"] != "https://acme.example/v2" || upd["rate_limit"] != float64(50) || upd["description"] != "" || upd["secret"] != nil {
		t.Fatalf("update answered %v", upd)
	}
	steps := []struct {
		action, body string
		status       int
		state        string
	}{
		{"pause", `{"reason": "maintenance"}`, 200, "paused"},
		{"pause", `{}`, 200, "paused"},
		{"enable", ``, 409, ""},
		{"resume", ``, 200, "enabled"},
		{"disable", `{"reason": "contract ended"}`, 200, "disabled"},
		{"resume", ``, 409, ""},
		{"enable", ``, 200, "enabled"},
	}
	for _, s := range steps {
		var body any
		if s.body != "" {
			body = s.body
		}
		m := e.must(s.status, "POST", "/api/v1/endpoints/acme/"+s.action, opToken, body)
		if s.state != "" && m["state"] != s.state {
			t.Fatalf("%s: state %v, want %s", s.action, m["state"], s.state)
		}
	}
	rot := e.must(200, "POST", "/api/v1/endpoints/acme/rotate-secret", opToken, map[string]any{"grace": "1h"})
	newSecret, _ := rot["secret"].(string)
	rs := rot["secrets"].([]any)
	if newSecret == "" || newSecret == secret || len(rs) != 2 || rs[0].(map[string]any)["fingerprint"] != fingerprint(newSecret) {
		t.Fatalf("rotate answered %v", rot)
	}
	until, err := time.Parse(time.RFC3339Nano, rs[1].(map[string]any)["expires_at"].(string))
	if err != nil || until.Before(time.Now().Add(59*time.Minute)) || until.After(time.Now().Add(61*time.Minute)) {
		t.Fatalf("the old secret expires at %v (%v), want in an hour", rs[1], err)
	}
	def := e.must(200, "POST", "/api/v1/endpoints/b-ep/rotate-secret", opToken, nil)
	until, _ = time.Parse(time.RFC3339Nano, def["secrets"].([]any)[1].(map[string]any)["expires_at"].(string))
	if d := time.Until(until); d < 23*time.Hour || d > 25*time.Hour {
		t.Fatalf("a rotation without grace keeps the old secret %v, want 24h", d)
	}
	e.must(200, "DELETE", "/api/v1/endpoints/acme", opToken, nil)
	e.must(404, "GET", "/api/v1/endpoints/acme", opToken, nil)

	audit := e.must(200, "GET", "/api/v1/audit?endpoint_id=acme", opToken, nil)["data"].([]any)
	var actions []string
	for _, a := range audit {
		r := a.(map[string]any)
		if r["actor"] != "ops" || r["actor_kind"] != "operator" || r["endpoint_id"] != "acme" {
			t.Fatalf("audit record %v, want the operator ops on acme", r)
		}
		actions = append(actions, strings.TrimPrefix(r["action"].(string), "endpoint."))
	}
	want := "delete rotate-secret enable disable resume pause pause update create"
	if got := strings.Join(actions, " "); got != want {
		t.Fatalf("audit of acme, newest first: %s\nwant %s", got, want)
	}
	if strings.Contains(fmt.Sprint(audit), secret) || strings.Contains(fmt.Sprint(audit), newSecret) {
		t.Fatal("an audit record holds a secret")
	}
}

// Every refusal is a problem (RFC 9457) with a stable type and, for a field, its name and the
// words the CLI and the Go API use for the same refusal.
func TestProblems(t *testing.T) {
	e := newEnv(t, func(c *api.Config) { c.MaxBodyBytes = 4096 })
	cliWords := func(ep endpoints.Endpoint) string {
		err := endpoints.Store{}.Validate(ep)
		if err == nil {
			t.Fatalf("%v is valid", ep)
		}
		return strings.TrimPrefix(err.Error(), "endpoints: ")
	}
	for _, tt := range []struct {
		name         string
		method, path string
		body         any
		ctype        string
		status       int
		typ, field   string
		detailHas    string
	}{
		{"unknown field", "POST", "/api/v1/endpoints", `{"url": "https://a.example/", "uri": "x"}`, "", 400, "malformed", "uri", ""},
		{"wrong type", "POST", "/api/v1/endpoints", `{"url": "https://a.example/", "rate_limit": "fast"}`, "", 400, "malformed", "rate_limit", ""},
		{"not an object", "POST", "/api/v1/endpoints", `[1]`, "", 400, "malformed", "", "not a JSON object"},
		{"malformed url", "POST", "/api/v1/endpoints", `{"url": "ftp://a.example/"}`, "", 422, "invalid", "url",
			cliWords(endpoints.Endpoint{URL: "ftp://a.example/"})},
		{"short secret", "POST", "/api/v1/endpoints", `{"url": "https://a.example/", "secret": "short"}`, "", 422, "invalid", "secret",
			cliWords(endpoints.Endpoint{URL: "https://a.example/", Secret: "short"})},
		{"a pattern that can never match", "POST", "/api/v1/endpoints", `{"url": "https://a.example/", "event_types": ["order."]}`, "",
			422, "invalid", "event_types", cliWords(endpoints.Endpoint{URL: "https://a.example/", EventTypes: []string{"order."}})},
		{"too large", "POST", "/api/v1/endpoints", `{"url": "https://a.example/", "description": "` + strings.Repeat("x", 5000) + `"}`,
			"", 413, "too-large", "", "4096 bytes"},
		{"not json", "POST", "/api/v1/endpoints", `url=x`, "application/x-www-form-urlencoded", 415, "media-type", "", "application/json"},
		{"bad limit", "GET", "/api/v1/endpoints?limit=5000", nil, "", 400, "malformed", "limit", ""},
		{"unknown parameter", "GET", "/api/v1/endpoints?tenant=acme", nil, "", 400, "malformed", "tenant", ""},
		{"bad cursor", "GET", "/api/v1/endpoints?cursor=zzz", nil, "", 400, "malformed", "cursor", ""},
		{"unknown route", "GET", "/api/v1/endpoint", nil, "", 404, "not-found", "", "openapi.json"},
		{"wrong method", "PUT", "/api/v1/endpoints", nil, "", 405, "method", "", "GET, HEAD, POST"},
		{"no endpoint", "GET", "/api/v1/endpoints/nobody", nil, "", 404, "not-found", "", "nobody"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var h []string
			if tt.ctype != "" {
				h = []string{"Content-Type", tt.ctype}
			}
			a := e.do(tt.method, tt.path, opToken, tt.body, h...)
			if a.status != tt.status || a.header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("%d %s %s, want %d application/problem+json", a.status, a.header.Get("Content-Type"), a.body, tt.status)
			}
			p := a.json(t)
			if p["type"] != "urn:outbox-relay:problem:"+tt.typ || p["status"] != float64(tt.status) || p["title"] == "" {
				t.Fatalf("problem %v, want type %s", p, tt.typ)
			}
			if tt.field != "" {
				errs, _ := p["errors"].([]any)
				if len(errs) == 0 || errs[0].(map[string]any)["field"] != tt.field {
					t.Fatalf("problem %v does not name the field %s", p, tt.field)
				}
			}
			if tt.detailHas != "" && !strings.Contains(fmt.Sprint(p["detail"]), tt.detailHas) {
				t.Fatalf("detail %q, want it to say %q", p["detail"], tt.detailHas)
			}
		})
	}
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_endpoints`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused requests left %d endpoints (%v)", n, err)
	}
	// The positive control: the same request, correct, is accepted.
	e.must(201, "POST", "/api/v1/endpoints", opToken, `{"url": "https://a.example/"}`)
	// An unauthenticated request says nothing but 401.
	a := e.do("GET", "/api/v1/endpoints", "", nil)
	if a.status != 401 || a.header.Get("WWW-Authenticate") == "" || strings.Contains(string(a.body), "detail") {
		t.Fatalf("no token: %d %v %s", a.status, a.header, a.body)
	}
	_ = http.StatusOK
}
