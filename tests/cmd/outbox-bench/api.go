package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// The API row: GET /api/v1/endpoints/{id}/deliveries on an endpoint whose delivery log holds
// 10 × BENCH_EVENTS entries (a million by default: a fifth failed attempts, one row each, the
// rest deliveries, 100 to a row, as the relay flushes them), beside BENCH_EVENTS entries of 99
// other endpoints. It times pages of 100 through the API in this process, over HTTP: the newest
// page, pages deep in the log (a random until in the newer 90%), and failed attempts only; and it shows the plan
// of a deep page, which must read both tables through their endpoint indexes (a sequential scan
// of either fails the row from apiPlanChecked entries on; below, it is noted).

const (
	rowAPI         = "API: GET /deliveries"
	apiScale       = 10 // the endpoint's entries in BENCH_EVENTS
	apiRequests    = 300
	apiBenchToken  = "bench-operator-token-0123456789"
	apiEntriesSpan = time.Hour // the log's entries spread over this
)

// apiResult is the API row's figures.
type apiResult struct {
	Entries, Others int
	P50, P99        map[string]time.Duration // by kind of page
	Plan            string
	Scanned         []string // the log tables the plan scans sequentially
}

// apiPlanChecked is the size from which a sequential scan in the plan fails the row: below it,
// a table of a few hundred rows is cheaper to scan, and the planner rightly does.
const apiPlanChecked = 1_000_000

var apiKinds = []string{"newest page", "deep page", "failed only"}

func (e *env) apiRow(res *results) suiteRow {
	return suiteRow{rowAPI, func(ctx context.Context) error {
		a, err := e.apiBench(ctx)
		res.api = keep(a, err)
		return err
	}}
}

func (e *env) apiBench(ctx context.Context) (apiResult, error) {
	res := apiResult{Entries: apiScale * e.cfg.Events, Others: e.cfg.Events, P50: map[string]time.Duration{},
		P99: map[string]time.Duration{}}
	db, err := newBenchDB(ctx, e.cluster, "api")
	if err != nil {
		return res, err
	}
	defer db.drop()
	e.logf("API: writing %s log entries of one endpoint and %s of 99 others", thousands(float64(res.Entries)),
		thousands(float64(res.Others)))
	end := time.Now().Truncate(time.Second)
	if err := db.writeLog(ctx, "bench", res.Entries, end); err != nil {
		return res, err
	}
	if err := db.writeLog(ctx, "", res.Others, end); err != nil {
		return res, err
	}
	pool, err := pgxpool.New(ctx, db.dsn)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	h, err := api.New(api.Config{Pool: pool, OperatorTokens: []api.OperatorToken{{Name: "bench", Token: apiBenchToken}}})
	if err != nil {
		return res, err
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	rng := rand.New(rand.NewPCG(7, 9))
	for _, kind := range apiKinds {
		var took []time.Duration
		for i := 0; i < apiRequests; i++ {
			q := url.Values{"limit": {"100"}}
			switch kind {
			case "deep page":
				q.Set("until", end.Add(-time.Duration(rng.Int64N(int64(apiEntriesSpan*9/10)))).Format(time.RFC3339Nano))
			case "failed only":
				q.Set("status", "failed")
				q.Set("until", end.Add(-time.Duration(rng.Int64N(int64(apiEntriesSpan*9/10)))).Format(time.RFC3339Nano))
			}
			d, err := timedGet(ctx, srv.URL+"/api/v1/endpoints/bench/deliveries?"+q.Encode())
			if err != nil {
				return res, fmt.Errorf("%s: %w", kind, err)
			}
			took = append(took, d)
		}
		slices.Sort(took)
		res.P50[kind], res.P99[kind] = took[len(took)/2], took[len(took)*99/100]
	}
	plan, err := state.ExplainEndpointLogPage(ctx, pool, "", state.LogPageQuery{Endpoint: "bench",
		Until: end.Add(-apiEntriesSpan / 2), Limit: 100})
	if err != nil {
		return res, err
	}
	res.Plan = plan
	e.logf("API: the plan of a deep page:\n%s", plan)
	for _, table := range []string{"outbox_delivery_attempts", "outbox_deliveries"} {
		if strings.Contains(plan, "Seq Scan on "+table) {
			res.Scanned = append(res.Scanned, table)
		}
	}
	if len(res.Scanned) > 0 && res.Entries >= apiPlanChecked {
		return res, fmt.Errorf("a page scans %s instead of reading its index (plan above)", strings.Join(res.Scanned, " and "))
	}
	return res, nil
}

// timedGet times one GET as an operator and checks it answered a full page.
func timedGet(ctx context.Context, u string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+apiBenchToken)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var page struct {
		Data []json.RawMessage `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&page)
	took := time.Since(start)
	if err != nil || resp.StatusCode != 200 || len(page.Data) != 100 {
		return 0, fmt.Errorf("GET %s: %d, %d entries, %v; want a page of 100", u, resp.StatusCode, len(page.Data), err)
	}
	return took, nil
}

// writeLog writes n log entries spread over the hour before end: a fifth failed attempts, the
// rest deliveries 100 to a row. endpoint "" spreads them over 99 endpoints.
func (db *benchDB) writeLog(ctx context.Context, endpoint string, n int, end time.Time) error {
	ep := `'` + endpoint + `'`
	if endpoint == "" {
		ep = `'other-' || (g % 99)`
	}
	span := apiEntriesSpan.Seconds()
	failed, rows := n/5, (n-n/5)/100
	for _, q := range []string{
		`INSERT INTO outbox_delivery_attempts (pipeline, endpoint_id, event_id, attempt, at, status_code, latency_ms, error)
		 SELECT 'default', ` + ep + `, gen_random_uuid(), 1, $1::timestamptz - (g::float8 / $2 * $3) * interval '1 second',
		        503, 20, 'HTTP 503: try later' FROM generate_series(1, $2::int) g`,
		`INSERT INTO outbox_deliveries (pipeline, endpoint_id, first_at, last_at, event_ids, delivered_at, attempts, latency_ms)
		 SELECT 'default', ` + ep + `, $1::timestamptz - ((g + 1)::float8 / $3 * $2) * interval '1 second',
		        $1::timestamptz - (g::float8 / $3 * $2) * interval '1 second',
		        array(SELECT gen_random_uuid() FROM generate_series(1, 100) WHERE g > 0),
		        array(SELECT $1::timestamptz - ((g + i / 100.0)::float8 / $3 * $2) * interval '1 second' FROM generate_series(0, 99) i),
		        array_fill(1, ARRAY[100]), array_fill(4, ARRAY[100])
		 FROM generate_series(1, $3::int) g`,
		`ANALYZE outbox_delivery_attempts`, `ANALYZE outbox_deliveries`,
	} {
		var args []any
		switch {
		case strings.Contains(q, "INSERT INTO outbox_delivery_attempts"):
			args = []any{end, failed, span}
		case strings.Contains(q, "INSERT INTO outbox_deliveries"):
			args = []any{end, span, rows}
		}
		if _, err := db.conn.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("write the delivery log: %w", err)
		}
	}
	return nil
}

func (r *results) apiCells(a *apiResult) []string {
	var notes []string
	for _, k := range apiKinds {
		notes = append(notes, fmt.Sprintf("%s p50 %s, p99 %s", k, ms(a.P50[k]), ms(a.P99[k])))
	}
	plan := "a deep page's plan reads both tables through their endpoint indexes"
	if len(a.Scanned) > 0 {
		plan = "a deep page's plan scans " + strings.Join(a.Scanned, " and ") + " (small tables; checked from " +
			thousands(apiPlanChecked) + " entries)"
	}
	notes = append(notes, fmt.Sprintf("pages of 100 over HTTP, %d each; %s entries of 99 other endpoints beside; %s",
		apiRequests, thousands(float64(a.Others)), plan))
	return []string{thousands(float64(a.Entries)), dash, dash, dash, dash, dash, dash, dash, strings.Join(notes, "; ")}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
