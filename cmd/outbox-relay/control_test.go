package main

import (
	"context"
	"strings"
	"testing"
)

// pause and resume write the pipeline's control row; status shows a paused pipeline with its
// reason, as a warning and in the PAUSE CONTROL table, and a running one after resume.
func TestPauseResumeAndStatus(t *testing.T) {
	dsn, _ := migratedDB(t)
	out, errOut, code := cli(t, "pause", "--dsn", dsn, "--reason", "partner maintenance")
	if code != 0 || !strings.Contains(out, `pipeline "default" paused (partner maintenance)`) {
		t.Fatalf("pause: exit %d, %q %q", code, out, errOut)
	}
	out, _, _ = cli(t, "status", "--dsn", dsn)
	for _, want := range []string{"PAUSE CONTROL", "default PAUSED since", "partner maintenance", "outbox-relay resume --pipeline default"} {
		if !strings.Contains(squash(out), want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	doc, _, _ := statusJSONOf(t, "--dsn", dsn)
	if len(doc.Control) != 1 || !doc.Control[0].Paused || doc.Control[0].Reason != "partner maintenance" {
		t.Errorf("control in JSON: %+v", doc.Control)
	}
	if _, _, code := cli(t, "resume", "--dsn", dsn); code != 0 {
		t.Fatalf("resume: exit %d", code)
	}
	out, _, _ = cli(t, "status", "--dsn", dsn)
	if !strings.Contains(squash(out), "default running") || strings.Contains(out, "PAUSED") {
		t.Errorf("status after resume:\n%s", out)
	}
	if _, errOut, code := cli(t, "pause", "--dsn", dsn, "--pipeline", ""); code != 2 || !strings.Contains(errOut, "--pipeline") {
		t.Errorf("empty --pipeline: exit %d, %q", code, errOut)
	}
}

// replay --since --dry-run counts the delivered, failed and parked rows of the range per
// aggregate type and sends nothing; without --dry-run it records a request that status lists
// until a relay completes it. Bad times and mixed selections are usage errors naming the fix.
func TestReplaySinceDryRunAndRequest(t *testing.T) {
	dsn, pool := migratedDB(t)
	mustExec(t, pool, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at)
		SELECT t, i::text, t || '.changed', '{}', s, now() - interval '1 hour'
		FROM unnest('{order,order,order,invoice,order}'::text[], '{done,done,failed,done,pending}'::text[]) AS x(t, s),
		     generate_series(1, 2) i`)
	mustExec(t, pool, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at)
		VALUES ('order', '1', 'order.changed', '{}', 'done', now() - interval '3 hours')`)
	out, errOut, code := cli(t, "replay", "--dsn", dsn, "--since", "2h", "--dry-run")
	if code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"invoice 2 events", "order 6 events", "2 rows of the range are not delivered yet: they go out first",
		"dry run: would re-send 10 events"} {
		if !strings.Contains(squash(out), want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = cli(t, "replay", "--dsn", dsn, "--since", "150m", "--aggregate-type", "invoice", "--dry-run")
	if !strings.Contains(out, "would re-send 2 events") || strings.Contains(out, "pruned") {
		t.Errorf("filtered dry run:\n%s", out)
	}
	out, _, _ = cli(t, "replay", "--dsn", dsn, "--since", "2026-01-01T00:00:00Z", "--dry-run")
	if !strings.Contains(out, "were pruned") {
		t.Errorf("a range older than the oldest row does not say what was pruned:\n%s", out)
	}
	var requests int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_replays`).Scan(&requests); err != nil || requests != 0 {
		t.Fatalf("dry runs recorded %d requests (%v)", requests, err)
	}

	out, errOut, code = cli(t, "replay", "--dsn", dsn, "--since", "2h")
	if code != 0 || !strings.Contains(out, "replay 1 requested: 10 events") {
		t.Fatalf("request: exit %d, %q %q", code, out, errOut)
	}
	doc, _, _ := statusJSONOf(t, "--dsn", dsn)
	if len(doc.Replays) != 1 || doc.Replays[0].Total != 10 || doc.Replays[0].State != "requested" {
		t.Errorf("replays in status: %+v", doc.Replays)
	}

	for _, tc := range []struct{ args, want string }{
		{"--since yesterday", "RFC 3339"},
		{"--since 2h --all", "do not go together"},
		{"--until 1h", "goes with --since"},
		{"--since 1h --until 2h", "is not after --since"},
	} {
		_, errOut, code := cli(t, append([]string{"replay", "--dsn", dsn}, strings.Fields(tc.args)...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("replay %s: exit %d, %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// A replay request the slot has confirmed past without completing it (the slot was dropped and
// created again meanwhile) can never run: status says it was abandoned.
func TestStatusSaysAReplayWasAbandoned(t *testing.T) {
	dsn, pool := migratedDB(t)
	ctx := context.Background()
	mustExec(t, pool, `INSERT INTO outbox_replays (pipeline, since, total, sent, request_lsn, state, requested_at)
		VALUES ('default', now() - interval '1 day', 10, 4, pg_current_wal_lsn(), 'running', now() - interval '5 minutes'),
		       ('default', now() - interval '1 day', 10, 4, pg_current_wal_lsn(), 'running', now())`)
	mustExec(t, pool, `SELECT pg_create_logical_replication_slot('abandon_test', 'pgoutput')`)
	t.Cleanup(func() { _, _ = pool.Exec(ctx, `SELECT pg_drop_replication_slot('abandon_test')`) })
	doc, _, _ := statusJSONOf(t, "--dsn", dsn, "--slot", "abandon_test")
	if len(doc.Replays) != 2 || doc.Replays[0].State != "abandoned" || doc.Replays[1].State != "running" {
		t.Fatalf("replays %+v: want the old one abandoned and the new one running", doc.Replays)
	}
	out, _, _ := cli(t, "status", "--dsn", dsn, "--slot", "abandon_test")
	if !strings.Contains(out, "was abandoned after 4 of 10 events") || !strings.Contains(out, "running: 4 of 10 events re-sent") {
		t.Errorf("status does not describe the replays:\n%s", out)
	}
}

// replay --since --endpoint counts what the endpoint will receive of the range: the rows its
// subscription takes (tenant, event types, aggregate types), beside the whole range's count.
func TestReplaySinceToAnEndpointCountsWhatItWouldReceive(t *testing.T) {
	dsn, pool := migratedDB(t)
	mustExec(t, pool, `INSERT INTO outbox_endpoints (id, url, secrets, tenant_id, event_types, aggregate_types)
		VALUES ('acme', 'https://acme.example/webhooks', '[{"secret": "a-long-random-secret-for-acme"}]', 'acme', '{order.*}', '{order}'),
		       ('ledger', 'https://ledger.example/in', '[{"secret": "a-long-random-secret-for-ledger"}]', NULL, '{invoice.*}', NULL)`)
	mustExec(t, pool, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at, tenant_id)
		SELECT a, i::text, e, '{}', s, now() - interval '1 hour', nullif(tn, '')
		FROM unnest('{order,order,invoice,order,order,order,order}'::text[],
		            '{order.created,order.shipped,invoice.paid,order.created,order.created,order.created,order.created}'::text[],
		            '{acme,acme,acme,globex,"",acme,acme}'::text[],
		            '{done,failed,done,done,done,pending,done}'::text[]) WITH ORDINALITY AS x(a, e, tn, s, i)`)
	mustExec(t, pool, `UPDATE outbox_events SET created_at = now() - interval '3 hours' WHERE aggregate_id = '7'`) // outside the range

	out, errOut, code := cli(t, "replay", "--dsn", dsn, "--since", "2h", "--endpoint", "acme", "--dry-run")
	if code != 0 {
		t.Fatalf("dry run: exit %d: %s", code, errOut)
	}
	// Of the range's 6 rows acme takes its tenant's orders: created, shipped (dead-lettered) and
	// the pending one; not its invoice, not globex's or the tenantless order.
	for _, want := range []string{"order 4 events", "endpoint acme takes 3 of these 6 events (tenant acme; event types order.*; aggregate types order;",
		"dry run: would re-send 3 events to acme"} {
		if !strings.Contains(squash(out), want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = cli(t, "replay", "--dsn", dsn, "--since", "2h", "--endpoint", "ledger", "--dry-run", "--json")
	if !strings.Contains(out, `"endpoint_events": 1`) || !strings.Contains(out, `"endpoint": "ledger"`) {
		t.Errorf("dry run --json for ledger (every tenant's invoices: 1 row):\n%s", out)
	}
	out, errOut, code = cli(t, "replay", "--dsn", dsn, "--since", "2h", "--endpoint", "acme")
	if code != 0 || !strings.Contains(out, "replay 1 requested: 3 events to acme") {
		t.Fatalf("request: exit %d, %q %q", code, out, errOut)
	}
	var pipeline string
	if err := pool.QueryRow(context.Background(), `SELECT pipeline FROM outbox_replays`).Scan(&pipeline); err != nil || pipeline != "default/acme" {
		t.Fatalf("the request is for %q (%v), want default/acme", pipeline, err)
	}
}
