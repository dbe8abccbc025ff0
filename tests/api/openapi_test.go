// Package api_test checks the management API against its OpenAPI 3.1 document with a standard
// validator (pb33f/libopenapi and libopenapi-validator, kept in this module so the library's
// module graph does not carry them): the document is valid, every request and answer of a
// session that exercises every operation matches it, and an operation never exercised fails
// the test.
package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

const opToken = "op-token-0123456789abcdefghij"

// operation is a documented path template and method, and a pattern matching its paths.
type operation struct {
	method, path string
	re           *regexp.Regexp
	literals     int
}

// session sends requests, checks each request and answer against the document, and counts
// which operations were exercised.
type session struct {
	t    *testing.T
	srv  *httptest.Server
	v    validator.Validator
	ops  []operation
	seen map[string]int
}

func newSession(t *testing.T, srv *httptest.Server) *session {
	t.Helper()
	doc, err := libopenapi.NewDocument(api.OpenAPI())
	if err != nil {
		t.Fatalf("the document does not parse: %v", err)
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("the document does not build: %v", err)
	}
	if v := model.Model.Version; v != "3.1.0" {
		t.Fatalf("openapi %s, want 3.1.0", v)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("document: %s: %s", e.Message, e.Reason)
		}
		t.FailNow()
	}
	s := &session{t: t, srv: srv, v: v, seen: map[string]int{}}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		re := regexp.MustCompile("^" + regexp.MustCompile(`\\\{[a-z_]+\\\}`).ReplaceAllString(regexp.QuoteMeta(path), `[^/]+`) + "$")
		literals := strings.Count(path, "/") - strings.Count(path, "{")
		for method := range item.GetOperations().FromOldest() {
			s.ops = append(s.ops, operation{strings.ToUpper(method), path, re, literals})
		}
	}
	return s
}

// op finds the documented operation of a request.
func (s *session) op(method, path string) string {
	best := -1
	for i, o := range s.ops {
		if o.method == method && o.re.MatchString(path) && (best < 0 || o.literals > s.ops[best].literals) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	return s.ops[best].method + " " + s.ops[best].path
}

// do sends a request (body: nil, a string sent as it is, or a value sent as JSON), checks it
// and its answer against the document, and fails unless the answer is want.
func (s *session) do(method, path, token string, body any, want int, headers ...string) map[string]any {
	s.t.Helper()
	var raw []byte
	switch b := body.(type) {
	case nil:
	case string:
		raw = []byte(b)
	default:
		raw, _ = json.Marshal(b)
	}
	req, _ := http.NewRequestWithContext(context.Background(), method, s.srv.URL+path, bytes.NewReader(raw))
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		s.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, out, want)
	}
	op := s.op(method, req.URL.Path)
	if op == "" {
		s.t.Fatalf("%s %s is not in the document", method, path)
	}
	s.seen[op]++
	// The validator reads both bodies again.
	check, _ := http.NewRequest(method, "http://api.test"+path, bytes.NewReader(raw))
	check.Header = req.Header.Clone()
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.Request = check
	// A request the API refuses on purpose breaks the document; its answer must still match it.
	validate := s.v.ValidateHttpRequestResponse
	if want >= 400 {
		validate = s.v.ValidateHttpResponse
	}
	if ok, errs := validate(check, resp); !ok {
		for _, e := range errs {
			s.t.Errorf("%s %s (%d): %s: %s %v", method, path, resp.StatusCode, e.Message, e.Reason, e.SchemaValidationErrors)
		}
		s.t.FailNow()
	}
	var m map[string]any
	_ = json.Unmarshal(out, &m)
	return m
}

// Every operation of the document is exercised, its answers (successes and problems alike)
// matching the document, and the document itself is valid OpenAPI 3.1.
func TestEveryOperationMatchesTheDocument(t *testing.T) {
	_, pool := relaytest.MigratedDB(t)
	keys, err := api.ParseKeys("mG8cZk3mYF1yq0oQb5QhM0m3hXhR9S3Zf2w0lRk6x2U=")
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(api.Config{Pool: pool, OperatorTokens: []api.OperatorToken{{Name: "ops", Token: opToken}}, SigningKeys: keys})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	recv := relaytest.NewReceiver("partner-secret-0123456789")
	t.Cleanup(recv.Close)
	s := newSession(t, srv)
	acme, err := keys.Mint(api.Token{Tenant: "acme", TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}

	s.do("GET", "/api/v1/openapi.json", "", nil, 200)
	s.do("PUT", "/api/v1/event-types/order.created", opToken, map[string]any{"description": "an order was placed",
		"schema": map[string]any{"type": "object", "required": []string{"id"}}, "example": map[string]any{"id": 1}}, 201)
	s.do("PUT", "/api/v1/event-types/order.created", opToken, map[string]any{"description": "an order was placed",
		"schema": map[string]any{"type": "object"}, "example": map[string]any{"id": 1}}, 200)
	s.do("PUT", "/api/v1/event-types/order.paid", acme, map[string]any{"description": "x"}, 403)
	s.do("GET", "/api/v1/event-types", acme, nil, 200)
	s.do("GET", "/api/v1/event-types/order.created", acme, nil, 200)
	s.do("GET", "/api/v1/event-types/nope", acme, nil, 404)

	s.do("POST", "/api/v1/endpoints", opToken, map[string]any{"id": "partner", "url": recv.URL, "secret": recv.Secret,
		"event_types": []string{"order.*"}, "metadata": map[string]any{"plan": "pro"}}, 201, "Idempotency-Key", "k1")
	s.do("POST", "/api/v1/endpoints", opToken, map[string]any{"id": "partner", "url": recv.URL, "secret": recv.Secret,
		"event_types": []string{"order.*"}, "metadata": map[string]any{"plan": "pro"}}, 201, "Idempotency-Key", "k1")
	s.do("POST", "/api/v1/endpoints", opToken, map[string]any{"id": "partner", "url": recv.URL}, 409)
	s.do("POST", "/api/v1/endpoints", opToken, map[string]any{"url": "ftp://x.example/"}, 422)
	s.do("POST", "/api/v1/endpoints", opToken, `{"url": "https://x.example/", "nope": 1}`, 400)
	s.do("POST", "/api/v1/endpoints", opToken, `x=1`, 415, "Content-Type", "text/plain")
	s.do("POST", "/api/v1/endpoints", opToken, `{"description": "`+strings.Repeat("x", 300<<10)+`"}`, 413)
	s.do("POST", "/api/v1/endpoints", acme, map[string]any{"id": "acme-ep", "url": "https://acme.example/hooks",
		"event_types": []string{"order.created"}}, 201)
	s.do("GET", "/api/v1/endpoints", "", nil, 401)
	s.do("GET", "/api/v1/endpoints?limit=1", opToken, nil, 200)
	s.do("GET", "/api/v1/endpoints?state=enabled", acme, nil, 200)
	s.do("GET", "/api/v1/endpoints/partner", opToken, nil, 200)
	s.do("GET", "/api/v1/endpoints/partner", acme, nil, 404)
	s.do("PATCH", "/api/v1/endpoints/partner", opToken, map[string]any{"description": "the partner", "rate_limit": 100,
		"aggregate_types": nil}, 200)
	s.do("POST", "/api/v1/endpoints/partner/pause", opToken, map[string]any{"reason": "maintenance"}, 200)
	s.do("POST", "/api/v1/endpoints/partner/enable", opToken, nil, 409)
	s.do("POST", "/api/v1/endpoints/partner/resume", opToken, nil, 200)
	s.do("POST", "/api/v1/endpoints/partner/disable", opToken, nil, 200)
	s.do("POST", "/api/v1/endpoints/partner/enable", opToken, nil, 200)
	s.do("POST", "/api/v1/endpoints/acme-ep/rotate-secret", acme, map[string]any{"grace": "1h"}, 200)
	s.do("POST", "/api/v1/endpoints/partner/rotate-secret", opToken, map[string]any{"secret": recv.Secret, "grace": "0s"}, 200)

	res := s.do("POST", "/api/v1/endpoints/partner/test", opToken, map[string]any{"event_type": "order.created"}, 200)
	if res["delivered"] != true {
		t.Fatalf("test: %v", res)
	}
	s.do("POST", "/api/v1/endpoints/partner/test", opToken, nil, 200)
	ctx := context.Background()
	id, err := outbox.Enqueue(ctx, pool, outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created",
		TenantID: "acme", Payload: map[string]int{"id": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE outbox_events SET status = 'done', processed_at = now()`); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	if pv := s.do("POST", "/api/v1/endpoints/acme-ep/recover", acme, map[string]any{"since": since, "dry_run": true}, 200); pv["events"] != 1.0 {
		t.Errorf("a dry run counts %v events of acme's endpoint, want 1", pv["events"])
	}
	req := s.do("POST", "/api/v1/endpoints/acme-ep/recover", acme, map[string]any{"since": since}, 202)
	s.do("POST", "/api/v1/endpoints/acme-ep/recover", acme, map[string]any{"since": time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339),
		"until": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}, 422)
	s.do("POST", "/api/v1/endpoints/acme-ep/events/"+id.String()+"/resend", acme, nil, 202)
	if er := s.do("GET", "/api/v1/endpoints/acme-ep/events/"+id.String(), acme, nil, 200); er["body"] != `{"id": 1}` {
		t.Errorf("the event's request: body %v, want the payload", er["body"])
	}
	s.do("GET", "/api/v1/endpoints/acme-ep/events/00000000-0000-7000-8000-000000000000", acme, nil, 404)
	s.do("GET", fmt.Sprintf("/api/v1/requests/%v", req["id"]), acme, nil, 200)
	s.do("GET", "/api/v1/requests/999999", acme, nil, 404)
	s.do("GET", "/api/v1/endpoints/partner/deliveries?limit=1", opToken, nil, 200)
	s.do("GET", "/api/v1/endpoints/partner/deliveries?status=delivered&since="+since, opToken, nil, 200)
	s.do("GET", "/api/v1/endpoints/partner/deliveries?status=lost", opToken, nil, 400)
	s.do("GET", "/api/v1/endpoints/partner/stats", opToken, nil, 200)
	s.do("GET", "/api/v1/events/"+res["event_id"].(string)+"/deliveries", opToken, nil, 200)
	s.do("GET", "/api/v1/events/"+res["event_id"].(string)+"/deliveries", acme, nil, 404)
	s.do("GET", "/api/v1/audit", opToken, nil, 200)
	s.do("GET", "/api/v1/audit?endpoint_id=acme-ep&limit=2", acme, nil, 200)
	s.do("DELETE", "/api/v1/event-types/order.created", acme, nil, 403)
	s.do("DELETE", "/api/v1/event-types/order.created", opToken, nil, 204)
	s.do("DELETE", "/api/v1/endpoints/partner", opToken, nil, 200)
	s.do("DELETE", "/api/v1/endpoints/partner", opToken, nil, 404)

	var missing []string
	for _, o := range s.ops {
		if s.seen[o.method+" "+o.path] == 0 {
			missing = append(missing, o.method+" "+o.path)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Fatalf("documented operations no test exercised: %v", missing)
	}
	if len(s.ops) < 20 {
		t.Fatalf("the document has only %d operations: this check would prove little", len(s.ops))
	}
}
