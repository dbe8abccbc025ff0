package portal_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// signInOperator signs b in to the console with token.
func (b *browser) signInOperator(token string) page {
	b.e.t.Helper()
	b.must(b.get("/console/sign-in"), http.StatusOK, "Operator token")
	return b.post("/console/sign-in", url.Values{"token": {token}, "next": {"/console/"}})
}

// The console opens with an operator token posted once; a wrong token, a tenant token or a
// tenant's session opens nothing of it.
func TestConsoleSignIn(t *testing.T) {
	e := newEnv(t)
	b := e.browser()
	b.must(b.get("/console/"), http.StatusSeeOther)
	b.must(b.signInOperator("op-token-wrong-0123456789abcd"), http.StatusUnauthorized, "not an operator token")
	b.must(b.get("/console/"), http.StatusSeeOther)
	tenant := e.browser()
	tenant.signIn("acme")
	tenant.must(tenant.get("/console/"), http.StatusSeeOther)
	// A sign-in form posted without the form's own token (from another site) is refused.
	other := e.browser()
	other.must(other.do("POST", "/console/sign-in", url.Values{"token": {opToken}, "csrf": {"guess"}}), http.StatusForbidden)
	other.must(other.get("/console/"), http.StatusSeeOther)

	p := b.signInOperator(opToken)
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/console/" {
		t.Fatalf("sign-in: %d %s\n%s", p.status, p.header.Get("Location"), p.body)
	}
	b.must(b.get("/console/"), http.StatusOK, "Every endpoint", "ops")
	// The operator's session is no tenant's: the portal's pages do not open with it.
	b.must(b.get("/portal/"), http.StatusUnauthorized)
	// An address outside the console is not followed after a sign-in.
	c := e.browser()
	c.get("/console/sign-in?next=//evil.example/")
	if p := c.post("/console/sign-in", url.Values{"token": {opToken}, "next": {"//evil.example/"}}); p.header.Get("Location") != "/console/" {
		t.Fatalf("next //evil.example/ led to %q", p.header.Get("Location"))
	}
}

// The overview lists every tenant's endpoints a page at a time, in the order asked: by state
// (disabled, then paused, first), by undelivered (most first), by oldest undelivered.
func TestConsoleOverviewSortsAndPages(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// 120 endpoints of three tenants, some paused and disabled, with reported figures.
	for i := range 120 {
		state := "enabled"
		extra := ""
		switch {
		case i%40 == 7:
			state, extra = "disabled", ", disabled_at, disabled_reason"
		case i%30 == 5:
			state, extra = "paused", ", paused_at"
		}
		vals := ""
		if extra != "" {
			vals = ", now()"
			if state == "disabled" {
				vals += ", 'failing for 5 days: 503'"
			}
		}
		if _, err := e.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO outbox_endpoints (id, url, tenant_id, state%s, secrets)
			VALUES ($1, 'https://example.com/h', $2, $3%s, '[{"secret": "s3cr3t-s3cr3t-s3cr3t-s3cr3t"}]')`, extra, vals), fmt.Sprintf("ep%03d", i),
			[]string{"acme", "globex", "initech"}[i%3], state); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, `INSERT INTO outbox_endpoint_status (pipeline, endpoint_id, undelivered, oldest_undelivered_at)
			VALUES ('default', $1, $2::bigint, CASE WHEN $2::bigint > 0 THEN now() - make_interval(secs => $3) END)`,
			fmt.Sprintf("ep%03d", i), (i*37)%101, float64(i)); err != nil {
			t.Fatal(err)
		}
	}
	b := e.browser()
	b.signInOperator(opToken)
	ids := func(p page) []string {
		var out []string
		for _, m := range regexp.MustCompile(`href="/console/endpoints/(ep\d+)"`).FindAllStringSubmatch(p.body, -1) {
			out = append(out, m[1])
		}
		return out
	}
	all := func(query string) []string {
		var out []string
		path := "/console/?" + query
		for range 10 {
			p := b.must(b.get(path), http.StatusOK)
			out = append(out, ids(p)...)
			m := regexp.MustCompile(`<a href="(/console/\?[^"]+)">Next page</a>`).FindStringSubmatch(p.body)
			if m == nil {
				return out
			}
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
		t.Fatal("more than 10 pages")
		return nil
	}
	byState := all("sort=state")
	if len(byState) != 120 {
		t.Fatalf("%d endpoints listed by state, want 120", len(byState))
	}
	if byState[0] != "ep007" || byState[1] != "ep047" || byState[2] != "ep087" || byState[3] != "ep005" {
		t.Errorf("by state: %v, want the disabled ep007 ep047 ep087, then the paused", byState[:6])
	}
	byUndelivered := all("sort=undelivered")
	if len(byUndelivered) != 120 || byUndelivered[0] != "ep030" { // (30*37)%101 = 100, the most
		t.Errorf("by undelivered: %d, first %v", len(byUndelivered), byUndelivered[:3])
	}
	byOldest := all("sort=oldest")
	if len(byOldest) != 120 || byOldest[0] != "ep119" {
		t.Errorf("by oldest: %d, first %v", len(byOldest), byOldest[:3])
	}
	acme := all("sort=id&tenant=acme")
	if len(acme) != 40 || acme[0] != "ep000" || acme[1] != "ep003" {
		t.Errorf("acme's: %d %v", len(acme), acme[:3])
	}
	b.must(b.get("/console/pipelines"), http.StatusOK, "No slot of the relay")
	b.must(b.get("/console/endpoints/ep007"), http.StatusOK, "failing for 5 days: 503")
}
