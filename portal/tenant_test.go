package portal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/outbox"
)

var secretField = regexp.MustCompile(`id="secret" readonly value="([^"]+)"`)

// addEndpoint adds an endpoint through the form and returns its id and secret.
func (b *browser) addEndpoint(target, description string) (string, string) {
	b.e.t.Helper()
	b.must(b.get("/portal/endpoints/new"), http.StatusOK, "Add an endpoint")
	key := regexp.MustCompile(`name="key" value="([^"]+)"`).FindStringSubmatch(b.last)[1]
	p := b.must(b.post("/portal/endpoints/new", url.Values{"url": {target}, "description": {description}, "key": {key},
		"format": {"raw"}, "scheme": {"standard-webhooks"}}), http.StatusCreated, "shown this once")
	m := secretField.FindStringSubmatch(p.body)
	id := regexp.MustCompile(`<h1>Endpoint (\S+) added</h1>`).FindStringSubmatch(p.body)
	if m == nil || id == nil {
		b.e.t.Fatalf("no secret or id on the page:\n%s", p.body)
	}
	return id[1], m[1]
}

// Nothing of another tenant is reachable from the pages, whatever the address: each of acme's
// pages and changes, asked for by globex's session, answers not found and changes nothing,
// while acme's own session reaches each (the positive control).
func TestAnotherTenantReachesNothing(t *testing.T) {
	e := newEnv(t)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer recv.Close()
	acme, globex := e.browser(), e.browser()
	acme.signIn("acme")
	globex.signIn("globex")
	id, secret := acme.addEndpoint(recv.URL, "acme's orders")
	if !strings.HasPrefix(secret, "whsec_") {
		t.Errorf("secret %q", secret)
	}
	acme.must(acme.post("/portal/endpoints/"+id+"/test", nil), http.StatusOK, "Delivered")
	var event string
	if err := e.pool.QueryRow(context.Background(), `SELECT event_id::text FROM outbox_delivery_attempts
		UNION ALL SELECT unnest(event_ids)::text FROM outbox_deliveries LIMIT 1`).Scan(&event); err != nil {
		t.Fatal(err)
	}
	order, err := outbox.Enqueue(context.Background(), e.pool, outbox.Event{TenantID: "acme", AggregateType: "order",
		AggregateID: "o-1", EventType: "order.created", Payload: map[string]string{"order": "o-1"}})
	if err != nil {
		t.Fatal(err)
	}
	reads := []string{"/portal/endpoints/" + id, "/portal/endpoints/" + id + "/events/" + order.String(), "/portal/endpoints/" + id + "/edit", "/portal/endpoints/" + id + "/delete",
		"/portal/endpoints/" + id + "/test", "/portal/endpoints/" + id + "/rotate",
		"/portal/endpoints/" + id + "/recover?since=2020-01-01T00:00"}
	for _, path := range reads {
		acme.must(acme.get(path), http.StatusOK)
		globex.must(globex.get(path), http.StatusNotFound, "Not found")
	}
	globex.must(globex.get("/portal/"), http.StatusOK, "No endpoint yet")
	globex.must(globex.get("/portal/events?id="+event), http.StatusOK, "Not found")
	acme.must(acme.get("/portal/events?id="+event), http.StatusOK, id)
	globex.must(globex.get("/portal/audit"), http.StatusOK, "No change recorded")
	acme.must(acme.get("/portal/audit"), http.StatusOK, "endpoint.create")

	globex.get("/portal/") // a page with globex's own CSRF token
	changes := map[string]url.Values{
		"/portal/endpoints/" + id + "/edit":                             {"url": {"https://globex.example/steal"}, "format": {"raw"}, "scheme": {"x-signature"}},
		"/portal/endpoints/" + id + "/pause":                            nil,
		"/portal/endpoints/" + id + "/rotate":                           {"grace": {"0s"}},
		"/portal/endpoints/" + id + "/test":                             nil,
		"/portal/endpoints/" + id + "/recover":                          {"since": {"2020-01-01T00:00"}},
		"/portal/endpoints/" + id + "/delete":                           {"force": {"true"}},
		fmt.Sprintf("/portal/endpoints/%s/events/%s/resend", id, event): nil,
	}
	for path, form := range changes {
		globex.must(globex.post(path, form), http.StatusNotFound, "Not found")
	}
	var url, state string
	var secrets int
	if err := e.pool.QueryRow(context.Background(), `SELECT url, state, jsonb_array_length(secrets) FROM outbox_endpoints WHERE id = $1`, id).
		Scan(&url, &state, &secrets); err != nil {
		t.Fatal(err)
	}
	if url != recv.URL || state != "enabled" || secrets != 1 {
		t.Fatalf("globex changed acme's endpoint: url %s, state %s, %d secrets", url, state, secrets)
	}
	var replays int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_replays`).Scan(&replays); err != nil {
		t.Fatal(err)
	}
	if replays != 0 {
		t.Fatalf("globex made %d replay requests", replays)
	}
	// acme's own session makes the same change (the positive control of the refusals).
	acme.get("/portal/endpoints/" + id)
	acme.must(acme.post("/portal/endpoints/"+id+"/pause", nil), http.StatusSeeOther)
	acme.must(acme.get("/portal/endpoints/"+id+"?done=paused"), http.StatusOK, "The endpoint is paused", "Resume")
	// A tenant's session opens nothing of the console.
	globex.must(globex.get("/console/"), http.StatusSeeOther)
}

// A change needs the session's CSRF token: without it, or with another session's, it is
// refused and nothing changes; with it, the change is made.
func TestChangesNeedTheSessionsCSRFToken(t *testing.T) {
	e := newEnv(t)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer recv.Close()
	acme, other := e.browser(), e.browser()
	acme.signIn("acme")
	other.signIn("acme")
	id, _ := acme.addEndpoint(recv.URL, "")
	other.get("/portal/")
	for name, token := range map[string]string{"none": "-", "another session's": other.csrf()} {
		form := url.Values{"csrf": {token}}
		if token == "-" {
			form = url.Values{"csrf": {""}}
			acme.must(acme.do("POST", "/portal/endpoints/"+id+"/pause", url.Values{}), http.StatusForbidden, "This form has expired")
		}
		acme.must(acme.do("POST", "/portal/endpoints/"+id+"/pause", form), http.StatusForbidden, "This form has expired")
		var state string
		if err := e.pool.QueryRow(context.Background(), `SELECT state FROM outbox_endpoints WHERE id = $1`, id).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state != "enabled" {
			t.Fatalf("a POST with %s CSRF token paused the endpoint", name)
		}
	}
	acme.get("/portal/endpoints/" + id)
	acme.must(acme.post("/portal/endpoints/"+id+"/pause", nil), http.StatusSeeOther)
}

// The API's refusals show beside the field they name, in the API's words, and what was typed
// stays in the form.
func TestRefusalsShowBesideTheirField(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	b.signIn("acme")
	b.must(b.get("/portal/endpoints/new"), http.StatusOK)
	p := b.must(b.post("/portal/endpoints/new", url.Values{"url": {"not a url"}, "description": {"typed text"},
		"format": {"raw"}, "scheme": {"x-signature"}}), http.StatusUnprocessableEntity, `value="typed text"`, `aria-invalid="true"`)
	m := regexp.MustCompile(`<p class="field-error" id="url-err">([^<]+)</p>`).FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no error beside the URL:\n%s", p.body)
	}
	// The words are the API's own for the same request.
	req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/endpoints", strings.NewReader(`{"url": "not a url"}`))
	req.Header.Set("Authorization", "Bearer "+opToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var prob api.Problem
	if err := json.NewDecoder(resp.Body).Decode(&prob); err != nil {
		t.Fatal(err)
	}
	if len(prob.Errors) == 0 || prob.Errors[0].Field != "url" || prob.Errors[0].Detail != html.UnescapeString(m[1]) {
		t.Errorf("the page says %q beside the URL; the API says %+v", m[1], prob)
	}
}
