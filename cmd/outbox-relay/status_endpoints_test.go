package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/state"
)

// The report merges the rows as an operator reads them: the shards of a pipeline sum up into
// one line per endpoint, every endpoint shows in every pipeline with endpoints (reported or
// not), an endpoint reported but no longer a row shows as removed, a shard whose heartbeat
// stopped is named in a warning (and a pipeline without heartbeats, whose rows only say when
// figures last changed, is not), and the parked aggregates of P/E count for E in P only.
func TestEndpointReportMergesShardsAndFlagsAStoppedShard(t *testing.T) {
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	states := []state.EndpointState{
		{ID: "acme", TenantID: "acme", State: "enabled"},
		{ID: "globex", State: "disabled", Reason: "410 Gone", Since: ago(time.Hour)},
	}
	lanes := []state.EndpointStatus{
		{Pipeline: "partners_s0of2", EndpointID: "acme", Undelivered: 3, OldestUndelivered: ago(40 * time.Second),
			LastSuccess: ago(10 * time.Second), LastError: "HTTP 503", LastErrorAt: ago(5 * time.Second), FailuresInRow: 2, UpdatedAt: ago(2 * time.Second)},
		{Pipeline: "partners_s1of2", EndpointID: "acme", Undelivered: 4, OldestUndelivered: ago(90 * time.Second),
			LastSuccess: ago(20 * time.Second), LastError: "timeout", LastErrorAt: ago(30 * time.Second), FailuresInRow: 7, UpdatedAt: ago(10 * time.Minute)},
		{Pipeline: "partners_s0of2", EndpointID: "initech", Undelivered: 1, UpdatedAt: ago(2 * time.Second)},
		{Pipeline: "partners_s0of2", EndpointID: heartbeatID, UpdatedAt: ago(time.Second)},
		{Pipeline: "partners_s1of2", EndpointID: heartbeatID, UpdatedAt: ago(10 * time.Minute)},
		{Pipeline: "quiet", EndpointID: "acme", LastSuccess: ago(time.Hour), UpdatedAt: ago(time.Hour)},
	}
	parked := map[string]int64{"partners_s0of2/acme": 2, "partners_s1of2/acme": 1, "other/acme": 5}
	rep := buildEndpointReport(now, states, lanes, []string{"partners_s0of2", "partners_s1of2"}, parked, nil)

	byKey := map[string]endpointStatusLine{}
	for _, l := range rep.Endpoints {
		byKey[l.Pipeline+"/"+l.ID] = l
	}
	acme := byKey["partners/acme"]
	if acme.Undelivered != 7 || acme.FailuresInRow != 7 || acme.ParkedAggregates != 3 || acme.LastError != "HTTP 503" ||
		!acme.OldestUndeliveredAt.Equal(ago(90*time.Second)) || !acme.LastSuccessAt.Equal(ago(10*time.Second)) ||
		!acme.ReportedAt.Equal(ago(10*time.Minute)) || acme.TenantID == nil || *acme.TenantID != "acme" {
		t.Errorf("acme over two shards: %+v", acme)
	}
	if g := byKey["partners/globex"]; g.State != "disabled" || g.Reason != "410 Gone" || g.ReportedAt != nil || g.Undelivered != 0 {
		t.Errorf("globex, never reported: %+v", g)
	}
	if i := byKey["partners/initech"]; i.State != "removed" || i.Undelivered != 1 {
		t.Errorf("initech, reported but no longer a row: %+v", i)
	}
	if o := byKey["other/acme"]; o.ParkedAggregates != 5 || o.Undelivered != 0 {
		t.Errorf("acme in the pipeline that only parked: %+v", o)
	}
	if len(rep.Endpoints) != 7 {
		t.Errorf("%d lines, want 7 (acme, globex in partners, other and quiet; initech removed): %+v", len(rep.Endpoints), rep.Endpoints)
	}
	warnings := strings.Join(rep.Warnings, "\n")
	if !strings.Contains(warnings, "pipeline partners_s1of2 last reported its endpoints' status 10m0s ago") ||
		strings.Contains(warnings, "partners_s0of2") || strings.Contains(warnings, "quiet") || len(rep.Warnings) != 1 {
		t.Errorf("warnings:\n%s", warnings)
	}
	var lines []string
	for _, p := range rep.Pipelines {
		for _, sh := range p.Shards {
			lines = append(lines, shardLine(sh))
		}
	}
	for _, want := range []string{"pipeline partners_s0of2: reported 1s ago", "pipeline partners_s1of2: STALE, last reported 10m0s ago",
		"pipeline quiet: figures last changed 1h0m0s ago", "pipeline other: no figures yet"} {
		if !strings.Contains(strings.Join(lines, "\n"), want) {
			t.Errorf("the pipelines' lines lack %q:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	if rep.Totals["enabled"] != 1 || rep.Totals["disabled"] != 1 || rep.Totals["failing"] != 2 {
		t.Errorf("totals %v: want 1 enabled, 1 disabled, 2 lines failing or parked", rep.Totals)
	}

	only, err := rep.only("partners")
	if err != nil || len(only.Endpoints) != 3 || len(only.Pipelines) != 1 || strings.Contains(strings.Join(only.Warnings, ""), "other") {
		t.Errorf("only partners: %v %+v", err, only)
	}
	if _, err := rep.only("partners_s1of2"); err == nil || !strings.Contains(err.Error(), "use --pipeline partners") {
		t.Errorf("a shard's name: %v", err)
	}
	if _, err := rep.only("nope"); err == nil || !strings.Contains(err.Error(), "those with endpoints: other, partners, quiet") {
		t.Errorf("an unknown pipeline: %v", err)
	}
}

func TestFamilyOf(t *testing.T) {
	for name, want := range map[string]string{
		"orders_s0of4": "orders", "orders_s3of4": "orders", "orders_s4of4": "orders_s4of4", "a_b_s1of2": "a_b",
		"default": "default", "s1of2": "s1of2",
	} {
		if got := familyOf(name); got != want {
			t.Errorf("familyOf(%q) = %q, want %q", name, got, want)
		}
	}
}

// endpointStatusDoc is the part of `status --endpoints --json` the tests read.
type endpointStatusDoc struct {
	Warnings  []string `json:"warnings"`
	Pipelines []struct {
		Name   string `json:"name"`
		Shards []struct {
			Name  string `json:"name"`
			Stale bool   `json:"stale"`
		} `json:"shards"`
	} `json:"pipelines"`
	Totals    map[string]int `json:"totals"`
	Endpoints []struct {
		Pipeline         string  `json:"pipeline"`
		ID               string  `json:"id"`
		State            string  `json:"state"`
		Reason           string  `json:"reason"`
		Undelivered      int64   `json:"undelivered"`
		OldestSeconds    float64 `json:"oldest_undelivered_seconds"`
		LastSuccessAt    *string `json:"last_success_at"`
		LastError        string  `json:"last_error"`
		FailuresInRow    int     `json:"failures_in_row"`
		ParkedAggregates int64   `json:"parked_aggregates"`
		Backlog          int64   `json:"backlog"`
		ReportedAge      float64 `json:"reported_age_seconds"`
	} `json:"endpoints"`
}

// addEndpoints inserts n endpoints ep0000.. with plain SQL (the first one disabled).
func addEndpoints(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	mustExec(t, pool, `INSERT INTO outbox_endpoints (id, url, secrets, tenant_id)
		SELECT 'ep' || lpad(i::text, 4, '0'), 'https://partner.example/' || i,
		       jsonb_build_array(jsonb_build_object('secret', 'a-long-random-secret-' || i)), 't' || (i % 20)
		FROM generate_series(0, $1 - 1) i`, n)
	mustExec(t, pool, `UPDATE outbox_endpoints SET state = 'disabled', disabled_at = now(), disabled_reason = '410 Gone' WHERE id = 'ep0000'`)
}

// status --endpoints reads the status rows a relay wrote, with 5,000 endpoints, one query per
// table (the backlogs counted in one grouped query), and says when a pipeline stopped reporting.
func TestStatusEndpointsOfManyEndpoints(t *testing.T) {
	dsn, pool := migratedDB(t)
	ctx := context.Background()
	const n = 5000
	addEndpoints(t, pool, n)
	mustExec(t, pool, `INSERT INTO outbox_endpoint_status (pipeline, endpoint_id, undelivered, oldest_undelivered_at,
			last_success_at, last_error, last_error_at, failures_in_row, updated_at)
		SELECT 'partners', 'ep' || lpad(i::text, 4, '0'), i % 3, now() - interval '1 minute', now() - interval '5 seconds',
		       CASE WHEN i % 100 = 1 THEN 'HTTP 503' END, CASE WHEN i % 100 = 1 THEN now() END,
		       CASE WHEN i % 100 = 1 THEN 4 ELSE 0 END, now()
		FROM generate_series(0, $1 - 1) i`, n)
	mustExec(t, pool, `INSERT INTO outbox_endpoint_status (pipeline, endpoint_id, undelivered, updated_at)
		VALUES ('stopped', 'ep0002', 9, now() - interval '10 minutes'), ('stopped', '', 0, now() - interval '10 minutes'),
		       ('partners', '', 0, now())`)
	// The stopped pipeline's slot exists (by the relay's default name) and nobody streams it.
	mustExec(t, pool, `SELECT pg_create_logical_replication_slot('outbox_relay_stopped', 'pgoutput')`)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `SELECT pg_drop_replication_slot('outbox_relay_stopped')`)
	})
	var first string
	if err := pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '1', 'order.paid', '{}') RETURNING id::text`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	mustExec(t, pool, `INSERT INTO outbox_parked_aggregates (aggregate_type, aggregate_id, first_event_id, reason, pipeline, own_state)
		VALUES ('order', '1', $1, 'HTTP 422', 'partners/ep0001', true), ('order', '2', $1, 'HTTP 422', 'partners/ep0001', true)`, first)
	// ep0001's backlog holds 3 events in partners, ep0002's 1 in stopped.
	mustExec(t, pool, `INSERT INTO outbox_endpoint_backlog (pipeline, endpoint_id, lsn, idx, event_id)
		SELECT 'partners', 'ep0001', '0/10'::pg_lsn, g, $1::uuid FROM generate_series(1, 3) g
		UNION ALL SELECT 'stopped', 'ep0002', '0/10'::pg_lsn, 0, $1::uuid`, first)

	// Count the command's reads of the three tables with the server's per-table scan counters.
	scans := func() (n int64) {
		err := pool.QueryRow(ctx, `SELECT sum(seq_scan + coalesce(idx_scan, 0)) FROM pg_stat_user_tables
			WHERE relname IN ('outbox_endpoints', 'outbox_endpoint_status', 'outbox_parked_aggregates', 'outbox_endpoint_backlog')`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The setup's own scans reach the counters when its backends flush their statistics (at most
	// about a second later on a loaded machine): wait until the counters hold still.
	var before int64
	for settle := time.Now().Add(10 * time.Second); time.Now().Before(settle); {
		mustExec(t, pool, `SELECT pg_stat_clear_snapshot()`)
		before = scans()
		time.Sleep(1200 * time.Millisecond)
		mustExec(t, pool, `SELECT pg_stat_clear_snapshot()`)
		if scans() == before {
			break
		}
	}
	began := time.Now()
	out, errOut, code := cli(t, "status", "--endpoints", "--json", "--dsn", dsn)
	if code != 0 {
		t.Fatalf("status --endpoints --json: exit %d: %s", code, errOut)
	}
	t.Logf("status --endpoints --json of %d endpoints in 2 pipelines: %s, %d bytes", n, time.Since(began).Round(time.Millisecond), len(out))
	var doc endpointStatusDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("not JSON (%v):\n%.2000s", err, out)
	}
	if len(doc.Endpoints) != 2*n || doc.Totals["enabled"] != n-1 || doc.Totals["disabled"] != 1 {
		t.Fatalf("%d lines, totals %v; want %d (every endpoint in both pipelines)", len(doc.Endpoints), doc.Totals, 2*n)
	}
	ep1 := doc.Endpoints[1] // sorted by pipeline, id: partners/ep0001
	if ep1.Pipeline != "partners" || ep1.ID != "ep0001" || ep1.Undelivered != 1 || ep1.FailuresInRow != 4 || ep1.LastError != "HTTP 503" ||
		ep1.ParkedAggregates != 2 || ep1.Backlog != 3 || ep1.OldestSeconds < 59 || ep1.ReportedAge > 30 {
		t.Errorf("partners/ep0001: %+v", ep1)
	}
	if ep0 := doc.Endpoints[0]; ep0.State != "disabled" || ep0.Reason != "410 Gone" || ep0.Backlog != 0 {
		t.Errorf("ep0000: %+v", ep0)
	}
	if ep2 := doc.Endpoints[n+2]; ep2.Pipeline != "stopped" || ep2.ID != "ep0002" || ep2.Backlog != 1 {
		t.Errorf("stopped/ep0002: %+v", ep2)
	}
	if w := strings.Join(doc.Warnings, "\n"); !strings.Contains(w, "pipeline stopped last reported its endpoints' status 10m") ||
		!strings.Contains(w, "pipeline stopped is not streamed: no relay reads its slot outbox_relay_stopped") ||
		strings.Contains(w, "pipeline partners ") {
		t.Errorf("warnings: want two about the stopped pipeline (stale heartbeat, slot not streamed), none about partners:\n%s", w)
	}
	// Wait for the counters of this backend's statements to be flushed (they are at idle).
	var after int64
	deadline := time.Now().Add(10 * time.Second)
	for after = scans(); after-before < 4 && time.Now().Before(deadline); after = scans() {
		time.Sleep(100 * time.Millisecond)
		mustExec(t, pool, `SELECT pg_stat_clear_snapshot()`)
	}
	if after-before > 4 { // one read of each table
		t.Errorf("status --endpoints scanned the tables %d times for %d endpoints: want one query per table", after-before, n)
	}

	out, _, code = cli(t, "status", "--endpoints", "--pipeline", "partners", "--dsn", dsn)
	if code != 0 {
		t.Fatalf("table: exit %d", code)
	}
	text := squash(out)
	for _, want := range []string{`ENDPOINTS 4999 enabled, 0 paused, 1 disabled;`, `pipeline partners: reported \d+s ago`,
		`PIPELINE ENDPOINT STATE UNDELIVERED OLDEST BACKLOG LAST SUCCESS`,
		`partners ep0000 disabled: 410 Gone 0 1m\d+s 0 \d+s ago`, `partners ep0001 enabled 1 1m\d+s 3 \d+s ago 4 2 \d+s ago: HTTP 503 \d+s ago`} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("table lacks %q:\n%.1500s", want, text)
		}
	}
	if strings.Contains(text, "stopped ep") {
		t.Errorf("--pipeline partners shows another pipeline's lines")
	}
	if lines := strings.Count(out, "\n"); lines > n+10 {
		t.Errorf("%d lines for %d endpoints of one pipeline", lines, n)
	}
}

func TestStatusEndpointsRefusals(t *testing.T) {
	dsn, pool := migratedDB(t)
	addEndpoints(t, pool, 1)
	for _, tc := range []struct{ args, want string }{
		{"--top 3", "--endpoints and --top do not go together"},
		{"--pipeline nope", "no pipeline has run with endpoints yet"},
	} {
		_, errOut, code := cli(t, append([]string{"status", "--endpoints", "--dsn", dsn}, strings.Fields(tc.args)...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("status --endpoints %s: exit %d, %q; want %d and %q", tc.args, code, errOut, exitUsage, tc.want)
		}
	}
	out, _, code := cli(t, "status", "--endpoints", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "no pipeline has run with endpoints yet") || !strings.Contains(squash(out), "- ep0000 disabled") {
		t.Errorf("before any relay: exit %d\n%s", code, out)
	}
	_, errOut, code := cli(t, "status", "--endpoints", "--dsn", dsn, "--schema", "nowhere")
	if code == 0 || !strings.Contains(errOut, "nowhere") {
		t.Errorf("a schema without the tables: exit %d, %q", code, errOut)
	}
	// A pipelines file gives its schema, as it does to status.
	file := filepath.Join(t.TempDir(), "pipelines.yaml")
	yaml := "schema: elsewhere\npipelines:\n  - name: partners\n    webhook: {url: https://partner.example/hook, secret: a-long-enough-secret}\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = cli(t, "status", "--endpoints", "--dsn", dsn, "--config", file)
	if code == 0 || !strings.Contains(errOut, "elsewhere") {
		t.Errorf("--config with schema elsewhere: exit %d, %q; want the file's schema looked in", code, errOut)
	}
}

// replay --endpoint replays the parked aggregates of that endpoint's lane only, naming the
// lane P/ID in the request, and refuses an id that is not an endpoint.
func TestReplayEndpointParked(t *testing.T) {
	dsn, pool := migratedDB(t)
	ctx := context.Background()
	addEndpoints(t, pool, 2)
	ids := map[string]string{}
	for _, agg := range []string{"1", "2", "3"} {
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', $1, 'order.paid', '{}') RETURNING id::text`, agg).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids[agg] = id
	}
	// ep0001 parked orders 1 and 2 in pipeline partners; ep0000 parked order 3; the pipeline's
	// own lane parked order 1 too.
	for _, p := range []struct{ lane, agg string }{{"partners/ep0001", "1"}, {"partners/ep0001", "2"}, {"partners/ep0000", "3"}, {"partners", "1"}} {
		mustExec(t, pool, `INSERT INTO outbox_parked_aggregates (aggregate_type, aggregate_id, first_event_id, reason, pipeline, own_state)
			VALUES ('order', $1, $2, 'HTTP 422', $3, true)`, p.agg, ids[p.agg], p.lane)
		mustExec(t, pool, `INSERT INTO outbox_pipeline_events (pipeline, event_id, status, last_error) VALUES ($1, $2, 'failed', 'HTTP 422')`,
			p.lane, ids[p.agg])
	}
	mustExec(t, pool, `INSERT INTO outbox_endpoint_versions (pipeline, endpoint_id, lsn) VALUES ('partners', '', '0/0')`)

	out, errOut, code := cli(t, "replay", "--endpoint", "ep0001", "--dry-run", "--dsn", dsn)
	if code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"endpoint ep0001 of pipeline partners", "order/1 (parked: HTTP 422)", "order/2", "would re-send 2 events of 2 aggregates"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "order/3") {
		t.Errorf("the dry run of ep0001 lists ep0000's aggregate:\n%s", out)
	}
	_, errOut, _ = cli(t, "replay", "--endpoint", "ep0000", "--dry-run", "--dsn", dsn)
	if !strings.Contains(errOut, "endpoint ep0000 is disabled: it receives nothing until `outbox-relay endpoint enable ep0000`") {
		t.Errorf("no note that ep0000 is disabled: %q", errOut)
	}

	slot := walSlot(t, pool)
	out, errOut, code = cli(t, "replay", "--endpoint", "ep0001", "--aggregate", "order/2", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "replay requested: 1 events of 1 aggregates") {
		t.Fatalf("replay: exit %d, %q %q", code, out, errOut)
	}
	const parkedMsg = `{"aggregates":[{"type":"order","id":"2"}],"pipeline":"partners/ep0001"}`
	if msg := walMessages(t, pool, slot); !strings.Contains(msg, parkedMsg) {
		t.Errorf("the WAL holds no %s: %q", parkedMsg, msg)
	}

	out, errOut, code = cli(t, "replay", "--since", "1h", "--endpoint", "ep0001", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "endpoint ep0001 of pipeline partners, rows created from") {
		t.Fatalf("replay --since --endpoint: exit %d, %q %q", code, out, errOut)
	}
	var pipeline string
	var id int64
	if err := pool.QueryRow(ctx, `SELECT pipeline, id FROM outbox_replays ORDER BY id DESC LIMIT 1`).Scan(&pipeline, &id); err != nil ||
		pipeline != "partners/ep0001" {
		t.Errorf("the since request names %q (%v), want partners/ep0001", pipeline, err)
	}
	sinceMsg := fmt.Sprintf(`{"aggregates":null,"pipeline":"partners/ep0001","since_request":%d}`, id)
	if msg := walMessages(t, pool, slot); !strings.Contains(msg, sinceMsg) {
		t.Errorf("the WAL holds no %s: %q", sinceMsg, msg)
	}

	for _, tc := range []struct{ args, want string }{
		{"--endpoint nope --all", "no endpoint \"nope\": `outbox-relay endpoint list` lists them"},
		{"--since 1h --endpoint nope", "no endpoint \"nope\": `outbox-relay endpoint list` lists them"},
		{"--endpoint=", "--endpoint needs the endpoint's id"},
	} {
		_, errOut, code := cli(t, append([]string{"replay", "--dsn", dsn}, strings.Fields(tc.args)...)...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("replay %s: exit %d, %q; want %q", tc.args, code, errOut, tc.want)
		}
	}
	// A replay --since naming a pipeline with endpoints would be ignored by its relay: refused.
	_, errOut, code = cli(t, "replay", "--since", "1h", "--pipeline", "partners", "--dsn", dsn)
	if code != exitUsage || !strings.Contains(errOut, "pipeline partners delivers to endpoints: a replay goes to one of them, --endpoint ID") {
		t.Errorf("replay --since of a pipeline with endpoints: exit %d, %q", code, errOut)
	}
	// Without --endpoint, two lanes with parked aggregates: the hint names --endpoint.
	_, errOut, code = cli(t, "replay", "--all", "--dry-run", "--dsn", dsn)
	if code != exitUsage || !strings.Contains(errOut, "partners/ep0000, partners/ep0001") || !strings.Contains(errOut, "--endpoint ID --pipeline P") {
		t.Errorf("replay --all with two lanes parked: exit %d, %q", code, errOut)
	}
	mustExec(t, pool, `INSERT INTO outbox_endpoint_versions (pipeline, endpoint_id, lsn) VALUES ('billing', '', '0/0')`)
	_, errOut, code = cli(t, "replay", "--endpoint", "ep0001", "--dry-run", "--dsn", dsn)
	if code != exitUsage || !strings.Contains(errOut, "several pipelines run with endpoints (billing, partners): choose one with --pipeline NAME") {
		t.Errorf("two pipelines with endpoints: exit %d, %q", code, errOut)
	}
}

// walSlot creates a pgoutput slot (and a publication for it) that the test peeks at, dropped
// when the test ends.
func walSlot(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	slot := fmt.Sprintf("peek_%d", time.Now().UnixNano())
	mustExec(t, pool, `CREATE PUBLICATION `+slot+` FOR TABLE outbox_events`)
	mustExec(t, pool, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot) })
	return slot
}

// walMessages returns the bytes of every change and logical message the slot decodes since its
// creation: a replay request's JSON is in it as written.
func walMessages(t *testing.T, pool *pgxpool.Pool, slot string) string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2, 'messages', 'true')`, slot, slot)
	if err != nil {
		t.Fatal(err)
	}
	var all, data []byte
	if _, err := pgx.ForEachRow(rows, []any{&data}, func() error { all = append(all, data...); return nil }); err != nil {
		t.Fatal(err)
	}
	return string(all)
}
