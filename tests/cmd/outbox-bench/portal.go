package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/portal"
)

// The portal row: the pages of the operator console (package portal) over HTTP in this process,
// signed in as an operator, on a database of portalEndpoints endpoints (with what their lanes
// reported) and an endpoint "bench" whose delivery log holds 10 × BENCH_EVENTS entries (a
// million by default), written as the API row writes them. It times every page of the
// console's list sorted by state and by undelivered (walking the next-page links to the end),
// and the endpoint's page: its newest deliveries and a deep page (a random until). Issue 36
// asks each under a second of server time; a page is timed from the request to the end of the
// answer, the client in this process.

const (
	rowPortal       = "Portal: console and endpoint pages"
	portalEndpoints = 5000
	portalRequests  = 50 // endpoint pages of each kind
)

var portalKinds = []string{"list by state", "list by undelivered", "endpoint page", "endpoint page, deep"}

// portalResult is the portal row's figures.
type portalResult struct {
	Endpoints, Entries int
	Pages              map[string]int
	P50, P99, Max      map[string]time.Duration
}

func (e *env) portalRow(res *results) suiteRow {
	return suiteRow{rowPortal, func(ctx context.Context) error {
		p, err := e.portalBench(ctx)
		res.portal = keep(p, err)
		return err
	}}
}

func (e *env) portalBench(ctx context.Context) (portalResult, error) {
	res := portalResult{Endpoints: portalEndpoints, Entries: apiScale * e.cfg.Events, Pages: map[string]int{},
		P50: map[string]time.Duration{}, P99: map[string]time.Duration{}, Max: map[string]time.Duration{}}
	db, err := newBenchDB(ctx, e.cluster, "portal")
	if err != nil {
		return res, err
	}
	defer db.drop()
	e.logf("Portal: writing %d endpoints and %s log entries of one", portalEndpoints, thousands(float64(res.Entries)))
	end := time.Now().Truncate(time.Second)
	if err := db.writeEndpoints(ctx, portalEndpoints); err != nil {
		return res, err
	}
	if err := db.writeLog(ctx, "bench", res.Entries, end); err != nil {
		return res, err
	}
	pool, err := pgxpool.New(ctx, db.dsn)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	a, err := api.New(api.Config{Pool: pool, OperatorTokens: []api.OperatorToken{{Name: "bench", Token: apiBenchToken}}})
	if err != nil {
		return res, err
	}
	p, err := portal.New(portal.Config{API: a, Pool: pool})
	if err != nil {
		return res, err
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	c, err := consoleSignIn(ctx, srv.URL)
	if err != nil {
		return res, err
	}
	took := map[string][]time.Duration{}
	for _, sort := range []string{"state", "undelivered"} {
		kind := "list by " + sort
		next := "/console/?sort=" + sort
		seen := 0
		for next != "" {
			body, d, err := c.get(ctx, srv.URL+next)
			if err != nil {
				return res, fmt.Errorf("%s: %w", kind, err)
			}
			took[kind] = append(took[kind], d)
			seen += strings.Count(body, `href="/console/endpoints/`) - strings.Count(body, `href="/console/endpoints/new"`)
			next = nextPage(body)
		}
		if seen != portalEndpoints {
			return res, fmt.Errorf("%s: the pages list %d endpoints, want %d", kind, seen, portalEndpoints)
		}
	}
	for i := 0; i < portalRequests; i++ {
		for _, kind := range []string{"endpoint page", "endpoint page, deep"} {
			u := srv.URL + "/console/endpoints/bench"
			if kind == "endpoint page, deep" {
				until := end.Add(-apiEntriesSpan * time.Duration(10+i*80/portalRequests) / 100).UTC().Format("2006-01-02T15:04")
				u += "?until=" + url.QueryEscape(until)
			}
			body, d, err := c.get(ctx, u)
			if err != nil {
				return res, fmt.Errorf("%s: %w", kind, err)
			}
			if n := strings.Count(body, "<li>\n<details>"); n != portal.PageSize {
				return res, fmt.Errorf("%s: %d deliveries on the page, want %d", kind, n, portal.PageSize)
			}
			took[kind] = append(took[kind], d)
		}
	}
	for _, kind := range portalKinds {
		ts := took[kind]
		slices.Sort(ts)
		res.Pages[kind] = len(ts)
		res.P50[kind], res.P99[kind], res.Max[kind] = ts[len(ts)/2], ts[len(ts)*99/100], ts[len(ts)-1]
	}
	return res, nil
}

// writeEndpoints writes n endpoints, "bench" among them, a tenant to every 10, a tenth paused
// and a twentieth disabled, each with a status row of its lane as a relay reports it.
func (db *benchDB) writeEndpoints(ctx context.Context, n int) error {
	for _, q := range []string{
		`INSERT INTO outbox_endpoints (id, url, tenant_id, secrets, state, paused_at, disabled_at, disabled_reason)
		 SELECT CASE WHEN g = 1 THEN 'bench' ELSE 'ep-' || g END, 'https://partner-' || g || '.example/hooks',
		        'tenant-' || (g / 10), jsonb_build_array(jsonb_build_object('secret', 'bench-secret-0123456789-' || g)),
		        CASE WHEN g % 20 = 7 THEN 'disabled' WHEN g % 10 = 3 THEN 'paused' ELSE 'enabled' END,
		        CASE WHEN g % 20 <> 7 AND g % 10 = 3 THEN now() END,
		        CASE WHEN g % 20 = 7 THEN now() END, CASE WHEN g % 20 = 7 THEN 'failing for 5 days: HTTP 503' END
		 FROM generate_series(1, $1::int) g`,
		`INSERT INTO outbox_endpoint_status (pipeline, endpoint_id, undelivered, oldest_undelivered_at, failures_in_row,
		        last_error, last_error_at, failing_since)
		 SELECT 'default', id, (hashtext(id) & 1023), now() - ((hashtext(id) & 4095) * interval '1 second'),
		        (hashtext(id) & 7), 'HTTP 503: try later', now(), now() - interval '1 hour'
		 FROM outbox_endpoints`,
		`ANALYZE outbox_endpoints`, `ANALYZE outbox_endpoint_status`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{n}
		}
		if _, err := db.conn.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("write the endpoints: %w", err)
		}
	}
	return nil
}

// consoleClient is a browser of the console: its cookies, no redirects followed.
type consoleClient struct{ c *http.Client }

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// consoleSignIn signs an operator in through the console's form.
func consoleSignIn(ctx context.Context, base string) (consoleClient, error) {
	jar, _ := cookiejar.New(nil)
	c := consoleClient{&http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
	body, _, err := c.get(ctx, base+"/console/sign-in")
	if err != nil {
		return c, err
	}
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		return c, fmt.Errorf("the sign-in page has no form token")
	}
	form := url.Values{"csrf": {m[1]}, "token": {apiBenchToken}}
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/console/sign-in", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.c.Do(req)
	if err != nil {
		return c, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return c, fmt.Errorf("sign in: %d", resp.StatusCode)
	}
	return c, nil
}

// get reads a page and times it to its last byte.
func (c consoleClient) get(ctx context.Context, u string) (string, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return "", 0, err
	}
	start := time.Now()
	resp, err := c.c.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	took := time.Since(start)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %d", u, resp.StatusCode)
	}
	return string(b), took, err
}

var nextRe = regexp.MustCompile(`<a href="(/console/\?[^"]+)">Next page</a>`)

// nextPage is the page's next-page link, "" on the last.
func nextPage(body string) string {
	m := nextRe.FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return strings.ReplaceAll(m[1], "&amp;", "&")
}

func (r *results) portalCells(p *portalResult) []string {
	var notes []string
	for _, k := range portalKinds {
		notes = append(notes, fmt.Sprintf("%s p50 %s, p99 %s, max %s (%d pages)", k, ms(p.P50[k]), ms(p.P99[k]), ms(p.Max[k]),
			p.Pages[k]))
	}
	notes = append(notes, fmt.Sprintf("%s endpoints; the endpoint page's log holds %s entries; pages of %d over HTTP, "+
		"signed in as an operator; target: each under 1 s", thousands(float64(p.Endpoints)), thousands(float64(p.Entries)),
		portal.PageSize))
	return []string{thousands(float64(p.Entries)), dash, dash, dash, dash, dash, dash, dash, strings.Join(notes, "; ")}
}
