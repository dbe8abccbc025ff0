package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// endpointCLI runs `outbox-relay endpoint ARGS --dsn DSN` in a child process with env, as a
// user would, and returns what it printed and its exit code.
func endpointCLI(t *testing.T, dsn string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return execCLI(t, env, append(append([]string{"endpoint"}, args...), "--dsn", dsn)...)
}

// endpointOut runs an endpoint command that must succeed with --json and decodes its output.
func endpointOut(t *testing.T, dsn string, env []string, v any, args ...string) {
	t.Helper()
	out, errOut, code := endpointCLI(t, dsn, env, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("endpoint %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("endpoint %s --json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Every command round-trips through --json: what add stored, show, list and update return,
// and each state command's result; the secret appears once, in add's and rotate-secret's
// output, and nowhere else.
func TestEndpointCLIRoundTrip(t *testing.T) {
	dsn, _ := migratedDB(t)
	var added endpointJSON
	endpointOut(t, dsn, nil, &added, "add", "--id", "acme", "--url", "https://acme.example/webhooks", "--tenant", "acme",
		"--event-types", "order.*, invoice.paid", "--aggregate-types", "order,invoice", "--scheme", "standard-webhooks",
		"--format", "cloudevents", "--batch-max-events", "20", "--batch-max-bytes", "65536", "--batch-linger", "10ms",
		"--rate-limit", "50", "--max-in-flight", "4", "--metadata", `{"customer":"Acme Corp"}`)
	if added.ID != "acme" || !strings.HasPrefix(added.Secret, "whsec_") || added.TenantID == nil || *added.TenantID != "acme" ||
		strings.Join(added.EventTypes, ",") != "order.*,invoice.paid" || strings.Join(added.AggregateTypes, ",") != "order,invoice" ||
		added.Format != "cloudevents" || added.BatchMaxEvents != 20 || added.BatchMaxBytes != 65536 || added.BatchLingerMS != 10 ||
		added.RateLimit != 50 || added.MaxInFlight != 4 || added.State != "enabled" || len(added.Secrets) != 1 || added.Secrets[0].Sealed {
		t.Fatalf("add: %+v", added)
	}
	var shown endpointJSON
	endpointOut(t, dsn, nil, &shown, "show", "acme")
	if shown.Secret != "" || shown.Secrets[0].Fingerprint != added.Secrets[0].Fingerprint {
		t.Fatalf("show: secret %q, secrets %+v", shown.Secret, shown.Secrets)
	}
	shown.Secret, added.Secret = "", ""
	if a, b := mustJSON(t, added), mustJSON(t, shown); a != b {
		t.Fatalf("show differs from add:\n%s\n%s", b, a)
	}
	text, _, code := endpointCLI(t, dsn, nil, "show", "acme")
	for _, want := range []string{"tenant: acme", "event types: order.*, invoice.paid", "secret #1: fingerprint " + added.Secrets[0].Fingerprint + ", in clear"} {
		if code != 0 || !strings.Contains(squash(text), want) {
			t.Errorf("show lacks %q:\n%s", want, text)
		}
	}
	var updated endpointJSON
	endpointOut(t, dsn, nil, &updated, "update", "acme", "--url", "https://acme.example/v2", "--no-tenant", "--aggregate-types", "")
	if updated.URL != "https://acme.example/v2" || updated.TenantID != nil || updated.AggregateTypes != nil || updated.Format != "cloudevents" ||
		updated.RateLimit != 50 || updated.Secret != "" {
		t.Fatalf("update changed what it was not given, or not what it was: %+v", updated)
	}
	for _, step := range []struct {
		args  []string
		state string
	}{
		{[]string{"pause", "acme", "--reason", "maintenance"}, "paused"},
		{[]string{"resume", "acme"}, "enabled"},
		{[]string{"disable", "acme", "--reason", "contract ended"}, "disabled"},
		{[]string{"enable", "acme"}, "enabled"},
	} {
		var e endpointJSON
		endpointOut(t, dsn, nil, &e, step.args...)
		if e.State != step.state {
			t.Fatalf("%v: state %s, want %s", step.args, e.State, step.state)
		}
	}
	var rotated endpointJSON
	endpointOut(t, dsn, nil, &rotated, "rotate-secret", "acme", "--keep-old", "24h")
	if rotated.Secret == "" || len(rotated.Secrets) != 2 || rotated.Secrets[1].ExpiresAt == nil || rotated.Secrets[0].ExpiresAt != nil {
		t.Fatalf("rotate-secret --keep-old: %+v", rotated)
	}
	var list []endpointJSON
	endpointOut(t, dsn, nil, &list, "list")
	if len(list) != 1 || list[0].ID != "acme" || list[0].Secret != "" || len(list[0].Secrets) != 2 {
		t.Fatalf("list: %+v", list)
	}
	all, _, _ := endpointCLI(t, dsn, nil, "list")
	shownText, _, _ := endpointCLI(t, dsn, nil, "show", "acme")
	// The table says what each endpoint receives and how it is sent, not only its id and URL.
	if header, row, _ := strings.Cut(all, "\n"); !strings.Contains(header, "AGGREGATE TYPES") || !strings.Contains(header, "SCHEME") ||
		!strings.Contains(header, "FORMAT") || !strings.Contains(row, "standard-webhooks") || !strings.Contains(row, "cloudevents") {
		t.Fatalf("list does not show the aggregate types, scheme and format:\n%s", all)
	}
	for _, secret := range []string{rotated.Secret, strings.TrimPrefix(rotated.Secret, "whsec_")} {
		if strings.Contains(all+shownText, secret) {
			t.Fatal("list or show printed the secret")
		}
	}
	var removed map[string]any
	endpointOut(t, dsn, nil, &removed, "remove", "acme")
	if removed["removed"] != true {
		t.Fatalf("remove: %v", removed)
	}
	if _, _, code := endpointCLI(t, dsn, nil, "show", "acme"); code != 1 {
		t.Fatalf("show after remove: exit %d, want 1", code)
	}
	if out, _, _ := endpointCLI(t, dsn, nil, "list", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("list --json of no endpoints: %q, want []", out)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Bad input exits 2 with the reason and the fix, and writes nothing; a missing endpoint, a
// taken id or a wrong state exits 1.
func TestEndpointCLIErrors(t *testing.T) {
	dsn, pool := migratedDB(t)
	if _, _, code := endpointCLI(t, dsn, nil, "add", "--id", "acme", "--url", "https://acme.example/"); code != 0 {
		t.Fatal("add acme failed")
	}
	if _, _, code := endpointCLI(t, dsn, nil, "pause", "acme"); code != 0 {
		t.Fatal("pause acme failed")
	}
	badKey := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(badKey, []byte("too-short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"no url", []string{"add"}, 2, "--url is required"},
		{"malformed url", []string{"add", "--url", "acme.example/hooks"}, 2, "must be an absolute http:// or https:// URL"},
		{"metadata address", []string{"add", "--url", "http://169.254.169.254/"}, 2, "--allow-private-url"},
		{"relay's metrics", []string{"add", "--url", "http://localhost:9187/metrics"}, 2, "relay's own metrics address"},
		{"unknown scheme", []string{"add", "--url", "https://x.example/", "--scheme", "hmac"}, 2, "use x-signature or standard-webhooks"},
		{"bad whsec", []string{"add", "--url", "https://x.example/", "--scheme", "standard-webhooks", "--secret", "plain-secret-0123456789"}, 2, "whsec_<base64>"},
		{"pattern that never matches", []string{"add", "--url", "https://x.example/", "--event-types", "order.,*.paid"}, 2, "did you mean order.*?"},
		{"empty tenant", []string{"add", "--url", "https://x.example/", "--tenant", ""}, 2, "--tenant is empty (an unset variable?)"},
		{"empty id", []string{"add", "--url", "https://x.example/", "--id", ""}, 2, "--id is empty"},
		{"bad id", []string{"add", "--url", "https://x.example/", "--id", "ACME"}, 2, "use a-z, 0-9"},
		{"bad metadata", []string{"add", "--url", "https://x.example/", "--metadata", "{"}, 2, "--metadata is not JSON"},
		{"bad key file", []string{"add", "--url", "https://x.example/", "--secrets-key-file", badKey}, 2, "openssl rand -base64 32"},
		{"taken id", []string{"add", "--id", "acme", "--url", "https://x.example/"}, 1, "exists: choose another --id"},
		{"missing id", []string{"show", "nobody"}, 1, "no endpoint \"nobody\": `outbox-relay endpoint list`"},
		{"remove a missing one", []string{"remove", "nobody"}, 1, "no endpoint \"nobody\""},
		{"enable a paused one", []string{"enable", "acme"}, 1, "resume it"},
		{"no argument", []string{"show"}, 2, "takes one argument, the endpoint's id"},
		{"two arguments", []string{"pause", "a", "b"}, 2, "takes one argument"},
		{"nothing to update", []string{"update", "acme"}, 2, "nothing to change"},
		{"tenant and no tenant", []string{"update", "acme", "--tenant", "a", "--no-tenant"}, 2, "contradict"},
		{"empty event types", []string{"update", "acme", "--event-types", ""}, 2, "--event-types is empty"},
		{"update a missing one", []string{"update", "nobody", "--url", "https://x.example/"}, 1, "no endpoint \"nobody\""},
		{"negative keep-old", []string{"rotate-secret", "acme", "--keep-old", "-1h"}, 2, "--keep-old must not be negative"},
		{"bad state filter", []string{"list", "--state", "gone"}, 2, "use enabled, paused or disabled"},
		{"reseal without a key", []string{"reseal"}, 2, "no secrets key"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := endpointCLI(t, dsn, nil, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.says) {
				t.Fatalf("exit %d, stderr %q; want exit %d saying %q (stdout %q)", code, errOut, tt.code, tt.says, out)
			}
		})
	}
	if _, errOut, code := execCLI(t, nil, "endpoint", "ad"); code != 2 || !strings.Contains(errOut, "Did you mean add?") {
		t.Errorf("unknown subcommand: exit %d, %q", code, errOut)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_endpoints`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d endpoints after the refusals (%v), want only acme", n, err)
	}
}

func keyText(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// With a secrets key from the environment the secret is sealed in the table; reseal with a new
// key first (from a file) moves it to that key. The secret is never printed but once, and
// stderr carries no secret.
func TestEndpointCLISealing(t *testing.T) {
	dsn, pool := migratedDB(t)
	oldKey := keyText(t)
	env := []string{secretsKeyEnv + "=" + oldKey}
	out, errOut, code := endpointCLI(t, dsn, env, "add", "--id", "acme", "--url", "https://acme.example/")
	if code != 0 || strings.Contains(errOut, "warning") {
		t.Fatalf("add with a key: exit %d, %q", code, errOut)
	}
	secret := strings.TrimSpace(out[strings.LastIndex(out, "\n  ")+3:])
	if len(secret) < 40 || strings.Contains(errOut, secret) {
		t.Fatalf("add printed %q (stderr %q)", out, errOut)
	}
	var stored string
	if err := pool.QueryRow(context.Background(), `SELECT secrets->0->>'secret' FROM outbox_endpoints WHERE id = 'acme'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stored, "sealed:v1:") || strings.Contains(stored, secret) {
		t.Fatalf("the stored secret %q is not sealed", stored)
	}
	shown, _, _ := endpointCLI(t, dsn, nil, "show", "acme")
	if !strings.Contains(shown, "sealed with key") || strings.Contains(shown, secret) {
		t.Fatalf("show:\n%s", shown)
	}
	_, errOut, _ = endpointCLI(t, dsn, nil, "add", "--id", "clear", "--url", "https://clear.example/")
	if !strings.Contains(errOut, "stored in clear") {
		t.Fatalf("add without a key does not warn: %q", errOut)
	}
	file := filepath.Join(t.TempDir(), "keys")
	newKey := keyText(t)
	if err := os.WriteFile(file, []byte("# new first, old kept until reseal ran\n"+newKey+"\n"+oldKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var res map[string]any
	endpointOut(t, dsn, []string{secretsKeyFileFlag.env + "=" + file}, &res, "reseal")
	if res["endpoints"] != 2.0 || res["resealed"] != 2.0 {
		t.Fatalf("reseal: %v, want both endpoints resealed", res)
	}
	var e endpointJSON
	endpointOut(t, dsn, nil, &e, "show", "clear")
	if !e.Secrets[0].Sealed || e.Secrets[0].KeyID != res["key_id"] {
		t.Fatalf("after reseal: %+v, want sealed with %v", e.Secrets, res["key_id"])
	}
}

// list reads page by page and prints every endpoint once, sorted by id, with its filters.
func TestEndpointCLIListsThousands(t *testing.T) {
	dsn, pool := migratedDB(t)
	mustExec(t, pool, `INSERT INTO outbox_endpoints (id, url, secrets, tenant_id)
		SELECT 'p' || lpad(i::text, 5, '0'), 'https://p' || i || '.example/', '[{"secret": "0123456789abcdef"}]',
		       CASE WHEN i % 3 = 0 THEN 'acme' END
		FROM generate_series(1, 1234) i`)
	var list []endpointJSON
	start := time.Now()
	endpointOut(t, dsn, nil, &list, "list")
	t.Logf("list --json of 1234 endpoints took %s", time.Since(start))
	if len(list) != 1234 || list[0].ID != "p00001" || list[1233].ID != "p01234" {
		t.Fatalf("list: %d endpoints, first %s", len(list), list[0].ID)
	}
	for i := 1; i < len(list); i++ {
		if list[i-1].ID >= list[i].ID {
			t.Fatalf("not sorted at %d", i)
		}
	}
	endpointOut(t, dsn, nil, &list, "list", "--tenant", "acme")
	if len(list) != 411 {
		t.Fatalf("list --tenant acme: %d, want 411", len(list))
	}
	endpointOut(t, dsn, nil, &list, "list", "--after", "p00500", "--limit", "600")
	if len(list) != 600 || list[0].ID != "p00501" || list[599].ID != "p01100" {
		t.Fatalf("list --after --limit: %d from %s", len(list), list[0].ID)
	}
	text, _, code := endpointCLI(t, dsn, nil, "list")
	if lines := strings.Count(text, "\n"); code != 0 || lines != 1235 {
		t.Fatalf("text list: exit %d, %d lines, want a header and 1234 rows", code, lines)
	}
}

// With the relay's tables in app (--schema, or OUTBOX_RELAY_SCHEMA) while the search_path is
// public, where a decoy outbox_endpoints of the same shape exists, every endpoint command reads
// and writes app.outbox_endpoints only; a command not given the schema works on public (the
// positive control), and a schema without the table is named with the fix.
func TestEndpointCLIWithSchemaBesideADecoy(t *testing.T) {
	db := newInstallDB(t, "")
	ctx := context.Background()
	mustCLI(t, "migrate", "--dsn", db.dsn, "--schema", "app")
	mustExec(t, db.pool, `CREATE TABLE public.outbox_endpoints (LIKE app.outbox_endpoints INCLUDING ALL)`)
	if _, stderr, code := endpointCLI(t, db.dsn, nil, "list"); code != 0 {
		t.Fatalf("list on public's decoy: exit %d, %s", code, stderr)
	}
	app := []string{"--schema", "app"}
	env := []string{"OUTBOX_RELAY_SCHEMA=app"}
	for _, step := range []struct {
		args []string
		env  []string
	}{
		{[]string{"add", "--id", "acme", "--url", "https://acme.example/webhooks", "--tenant", "acme"}, nil},
		{[]string{"add", "--id", "globex", "--url", "https://globex.example/webhooks"}, env},
		{[]string{"update", "acme", "--rate-limit", "5"}, nil},
		{[]string{"pause", "acme", "--reason", "maintenance"}, nil},
		{[]string{"resume", "acme"}, env},
		{[]string{"disable", "acme", "--reason", "contract ended"}, nil},
		{[]string{"enable", "acme"}, nil},
		{[]string{"rotate-secret", "acme", "--keep-old", "1h"}, env},
		{[]string{"show", "acme"}, nil},
		{[]string{"remove", "globex"}, nil},
	} {
		args := step.args
		if step.env == nil {
			args = append(slices.Clone(args), app...)
		}
		if out, stderr, code := endpointCLI(t, db.dsn, step.env, args...); code != 0 {
			t.Fatalf("endpoint %s: exit %d\n%s%s", strings.Join(args, " "), code, out, stderr)
		}
	}
	var listed []endpointJSON
	endpointOut(t, db.dsn, nil, &listed, "list", "--schema", "app")
	if len(listed) != 1 || listed[0].ID != "acme" || listed[0].RateLimit != 5 || len(listed[0].Secrets) != 2 {
		t.Fatalf("list --schema app: %+v; want acme, rate limit 5, two secrets", listed)
	}
	// The positive control: without the schema the commands follow the search_path, to public.
	if _, stderr, code := endpointCLI(t, db.dsn, nil, "add", "--id", "initech", "--url", "https://initech.example/"); code != 0 {
		t.Fatalf("add without --schema: exit %d, %s", code, stderr)
	}
	ids := func(table string) []string {
		rows, err := db.pool.Query(ctx, `SELECT id FROM `+table+` ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if a, p := ids("app.outbox_endpoints"), ids("public.outbox_endpoints"); !slices.Equal(a, []string{"acme"}) ||
		!slices.Equal(p, []string{"initech"}) {
		t.Fatalf("app holds %v, public %v; want [acme] and [initech]", a, p)
	}
	mustExec(t, db.pool, `DROP TABLE public.outbox_endpoints`)
	if _, stderr, code := endpointCLI(t, db.dsn, nil, "list"); code != 1 ||
		!strings.Contains(stderr, `does not exist in schema "public"`) || !strings.Contains(stderr, "pass --schema app") {
		t.Fatalf("list without the schema, public without the table: exit %d, %q; want 1 naming --schema app", code, stderr)
	}
	if _, stderr, code := endpointCLI(t, db.dsn, nil, "list", "--schema", "nope"); code != 1 ||
		!strings.Contains(stderr, "run `outbox-relay migrate --schema nope`") {
		t.Fatalf("list --schema nope: exit %d, %q", code, stderr)
	}
}

// show names the defaults an endpoint without its own cap or spill time gets, the numbers the
// docs give, not "the pipeline's".
func TestEndpointShowNamesTheDefaults(t *testing.T) {
	dsn, _ := migratedDB(t)
	if out, stderr, code := endpointCLI(t, dsn, nil, "add", "--id", "globex", "--url", "https://globex.example/webhooks"); code != 0 {
		t.Fatalf("add: exit %d\n%s%s", code, out, stderr)
	}
	out, stderr, code := endpointCLI(t, dsn, nil, "show", "globex")
	if code != 0 {
		t.Fatalf("show: exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{"max in flight:   16 (the default;", "spill after:     the pipeline's --spill-after (30s unless set)",
		"aggregate types: (every type)", "scheme:          x-signature", "format:          raw"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	if _, stderr, code := endpointCLI(t, dsn, nil, "update", "globex", "--max-in-flight", "4", "--aggregate-types", "order,invoice"); code != 0 {
		t.Fatalf("update: exit %d: %s", code, stderr)
	}
	if out, _, _ := endpointCLI(t, dsn, nil, "show", "globex"); !strings.Contains(out, "max in flight:   4\n") {
		t.Errorf("show after --max-in-flight 4:\n%s", out)
	}
	if out, _, _ := endpointCLI(t, dsn, nil, "list"); !strings.Contains(squash(out), "globex enabled - * order,invoice x-signature raw") {
		t.Errorf("list does not show the aggregate types, the scheme and the format:\n%s", out)
	}
}
