package portal_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/portal"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

const (
	opToken    = "op-token-0123456789abcdefghij"
	signingKey = "mG8cZk3mYF1yq0oQb5QhM0m3hXhR9S3Zf2w0lRk6x2U="
	secretsKey = "q7d3bXHgf3wE2Q1r2mS9c0dYp8k2QmFvQ1h6d3l4cE0="
)

// env is a migrated database, the API and the pages served on it, and a receiver.
type env struct {
	t    *testing.T
	pool *pgxpool.Pool
	srv  *httptest.Server
	keys *api.Keys
	api  *api.API
}

func newEnv(t *testing.T, mutate ...func(*portal.Config)) *env {
	t.Helper()
	_, pool := relaytest.MigratedDB(t)
	keys, err := api.ParseKeys(signingKey)
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Pool: pool, OperatorTokens: []api.OperatorToken{{Name: "ops", Token: opToken}},
		SigningKeys: keys, SecretsKeys: secretsKey, Egress: allowLoopback()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := portal.Config{API: a, Pool: pool, SigningKeys: keys}
	for _, m := range mutate {
		m(&cfg)
	}
	p, err := portal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/api/v1/", a)
	mux.Handle("/", p)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &env{t: t, pool: pool, srv: srv, keys: keys, api: a}
}

// browser is a client with its own cookies that does not follow redirects, so each answer is
// seen as it is.
type browser struct {
	e    *env
	c    *http.Client
	last string // the last page's body
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{e: e, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// page is an answer: status, headers and body.
type page struct {
	status int
	header http.Header
	body   string
}

func (b *browser) do(method, path string, form url.Values) page {
	b.e.t.Helper()
	var rd io.Reader
	if form != nil {
		rd = strings.NewReader(form.Encode())
	}
	u := path
	if !strings.HasPrefix(u, "http") {
		u = b.e.srv.URL + path
	}
	req, err := http.NewRequestWithContext(context.Background(), method, u, rd)
	if err != nil {
		b.e.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	b.last = string(body)
	return page{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

func (b *browser) get(path string) page { return b.do("GET", path, nil) }

// post sends form with the CSRF token of the last page read.
func (b *browser) post(path string, form url.Values) page {
	b.e.t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if form.Get("csrf") == "" {
		form.Set("csrf", b.csrf())
	}
	return b.do("POST", path, form)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (b *browser) csrf() string {
	m := csrfField.FindStringSubmatch(b.last)
	if m == nil {
		b.e.t.Fatalf("no CSRF token on the last page:\n%s", b.last)
	}
	return m[1]
}

// link mints a portal link for tenant.
func (e *env) link(tenant string, ttl time.Duration) string {
	e.t.Helper()
	l, err := portal.Link(e.keys, portal.LinkOptions{Tenant: tenant, TTL: ttl, BaseURL: e.srv.URL})
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// signIn opens a fresh link for tenant in b and follows its redirect.
func (b *browser) signIn(tenant string) {
	b.e.t.Helper()
	p := b.get(b.e.link(tenant, time.Minute))
	if p.status != http.StatusSeeOther {
		b.e.t.Fatalf("open link: %d\n%s", p.status, p.body)
	}
	if p := b.get(p.header.Get("Location")); p.status != http.StatusOK {
		b.e.t.Fatalf("first page: %d\n%s", p.status, p.body)
	}
}

func (b *browser) must(p page, status int, contains ...string) page {
	b.e.t.Helper()
	if p.status != status {
		b.e.t.Fatalf("status %d, want %d:\n%s", p.status, status, p.body)
	}
	for _, s := range contains {
		if !strings.Contains(p.body, s) {
			b.e.t.Fatalf("the page does not say %q:\n%s", s, p.body)
		}
	}
	return p
}

// allowLoopback admits the test receivers, which listen on 127.0.0.1, for tenants' endpoints
// (an operator's --egress-allow).
func allowLoopback() endpoints.Egress {
	return endpoints.Egress{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
}
