package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/outbox"
)

const apiToken = "op-token-0123456789abcdefghij"

// apiServer serves the management API on the test's database.
func (e *env) apiServer() *httptest.Server {
	e.t.Helper()
	h, err := api.New(api.Config{Pool: e.pool, OperatorTokens: []api.OperatorToken{{Name: "ops", Token: apiToken}}})
	if err != nil {
		e.t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	e.t.Cleanup(srv.Close)
	return srv
}

func apiCall(t *testing.T, srv *httptest.Server, method, path string, body any, want int) map[string]any {
	t.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %v, want %d", method, path, resp.StatusCode, m, want)
	}
	return m
}

// An endpoint created through the API receives exactly what one created with plain SQL does,
// from the commit of its creation: nothing committed before it, everything of its
// subscription after, in order per aggregate, signed with its own secret.
func TestEndpointCreatedThroughTheAPIGetsWhatSQLWould(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := e.apiServer()
	bySQL := newPartner(t, "by-sql", func(tenant, _, ev string) bool { return tenant == "t1" && ev == "order.created" })
	byAPI := newPartner(t, "by-api", func(tenant, _, ev string) bool { return tenant == "t1" && ev == "order.created" })
	e.start(endpointsConfig)
	mix := func(prefix string, live []*partner) {
		e.write(prefix+"-a", tenantEvents{"t1", "order", "order.created", 4, 3}, live)
		e.write(prefix+"-b", tenantEvents{"t1", "order", "order.paid", 4, 3}, live)
		e.write(prefix+"-c", tenantEvents{"t2", "order", "order.created", 4, 3}, live)
	}
	mix("before", nil)
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO outbox_endpoints (id, url, secrets, tenant_id, event_types)
		VALUES ($1, $2, jsonb_build_array(jsonb_build_object('secret', $3::text)), 't1', '{order.created}')`,
		bySQL.id, bySQL.recv.URL, "secret-of-"+bySQL.id+"-0123456789"); err != nil {
		t.Fatal(err)
	}
	mix("one", []*partner{bySQL})
	apiCall(t, srv, "POST", "/api/v1/endpoints", map[string]any{"id": byAPI.id, "url": byAPI.recv.URL,
		"secret": "secret-of-" + byAPI.id + "-0123456789", "tenant_id": "t1", "event_types": []string{"order.created"}}, 201)
	sqlOnly := len(bySQL.want.Committed)
	mix("both", []*partner{bySQL, byAPI})
	waitPartners(t, bySQL, byAPI)
	if !slices.Equal(bySQL.want.Committed[sqlOnly:], byAPI.want.Committed) || len(byAPI.want.Committed) == 0 {
		t.Fatalf("after both existed, the SQL endpoint was owed %d events, the API one %d: not the same",
			len(bySQL.want.Committed)-sqlOnly, len(byAPI.want.Committed))
	}
	for _, p := range []*partner{bySQL, byAPI} {
		if n := p.recv.BadSignatures(); n != 0 {
			t.Fatalf("endpoint %s: %d requests signed with another secret", p.id, n)
		}
	}
}

// A resend through the API goes to that endpoint only, behind the events of the aggregate the
// endpoint has not had yet: while the endpoint fails, the event's aggregate has a newer event
// waiting; the resent copy arrives after it, not before; GET /requests/{id} follows the
// request to done (its copy in the endpoint's backlog, delivered from there).
func TestResendThroughTheAPIKeepsTheAggregatesOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srv := e.apiServer()
	p := newPartner(t, "p", func(string, string, string) bool { return true })
	other := newPartner(t, "other", func(string, string, string) bool { return true })
	e.addPartner(p, endpoints.Endpoint{})
	e.addPartner(other, endpoints.Endpoint{})
	e.start(endpointsConfig)
	ctx := context.Background()
	enqueue := func(seq int) string {
		id, err := outbox.Enqueue(ctx, e.pool, outbox.Event{AggregateType: "order", AggregateID: "o1", EventType: "order.created",
			Payload: map[string]int{"seq": seq}})
		if err != nil {
			t.Fatal(err)
		}
		return id.String()
	}
	first := enqueue(1)
	waitFor(t, 30*time.Second, "the first event delivered", func() bool { return p.recv.Has(first) && other.recv.Has(first) })
	waitFor(t, 30*time.Second, "the first event marked done", func() bool { return e.status(first) == "done" })
	var failing atomic.Bool
	failing.Store(true)
	p.recv.SetFail(func(*http.Request) int {
		if failing.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	second := enqueue(2)
	waitFor(t, 30*time.Second, "the second event attempted and failed", func() bool {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_delivery_attempts WHERE endpoint_id = 'p' AND event_id = $1`, second).Scan(&n)
		return n > 0
	})
	req := apiCall(t, srv, "POST", "/api/v1/endpoints/p/events/"+first+"/resend", nil, 202)
	failing.Store(false)
	reqPath := fmt.Sprintf("/api/v1/requests/%v", req["id"])
	waitFor(t, time.Minute, "the resend done", func() bool { return apiCall(t, srv, "GET", reqPath, nil, 200)["status"] == "done" })
	// done: the copy is in the endpoint's backlog, in order; it is delivered from there
	var order []string
	waitFor(t, time.Minute, "the resent copy delivered", func() bool {
		order = order[:0]
		for _, d := range p.recv.Deliveries() {
			if d.Aggregate == "order/o1" {
				order = append(order, map[string]string{first: "1", second: "2"}[d.ID])
			}
		}
		return len(order) >= 3
	})
	if !slices.Equal(order, []string{"1", "2", "1"}) {
		t.Fatalf("endpoint p received o1's events as %v, want 1 2 1 (the resent copy behind the waiting 2)", order)
	}
	if n := len(other.recv.Deliveries()); n != 2 {
		t.Fatalf("the other endpoint received %d deliveries, want 2 (the resend is p's alone)", n)
	}
}
