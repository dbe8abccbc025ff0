package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// The README's configuration tables must list every flag of every command, so a new flag
// cannot ship undocumented.
func TestReadmeDocumentsEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "## Configuration")
	end := strings.Index(readme, "## The webhook contract")
	if start < 0 || end < start {
		t.Fatal("README has no Configuration section before the webhook contract")
	}
	config := readme[start:end]
	var check func(cmd *cobra.Command)
	check = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			// A subcommand is named with its group, and maybe its arguments: `endpoint show ID`.
			name := strings.TrimPrefix(sub.CommandPath(), "outbox-relay ")
			if !strings.Contains(config, "`"+name+"`") && !strings.Contains(config, "`"+name+" ") &&
				!strings.Contains(config, "outbox-relay "+name) {
				t.Errorf("README configuration does not mention the %s command", name)
			}
			sub.Flags().VisitAll(func(f *pflag.Flag) {
				if f.Name == "help" {
					return
				}
				if !strings.Contains(config, "`--"+f.Name+"`") {
					t.Errorf("README configuration lacks `--%s` (%s)", f.Name, name)
				}
			})
			check(sub)
		}
	}
	check(newRootCmd())
	for _, env := range []string{"DB_DSN", "WEBHOOK_URL", "WEBHOOK_SECRET", "WEBHOOK_SECRET_FILE", secretsKeyEnv, secretsKeyFileFlag.env} {
		if !strings.Contains(config, "`"+env+"`") {
			t.Errorf("README configuration lacks %s", env)
		}
	}
}

// readmeSQL returns the README's ```sql blocks, in order.
func readmeSQL(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	rest := string(b)
	for {
		start := strings.Index(rest, "\n```sql\n")
		if start < 0 {
			return blocks
		}
		rest = rest[start+len("\n```sql\n"):]
		end := strings.Index(rest, "\n```")
		if end < 0 {
			t.Fatal("README has an unterminated ```sql block")
		}
		blocks = append(blocks, rest[:end])
		rest = rest[end:]
	}
}

// Every SQL example in the README runs as written, in order, against a freshly migrated
// database, and the producer example leaves an event in the outbox.
func TestReadmeSQLRunsOnAMigratedDatabase(t *testing.T) {
	blocks := readmeSQL(t)
	if len(blocks) == 0 {
		t.Fatal("README has no ```sql block")
	}
	_, pool := relaytest.MigratedDB(t)
	ctx := context.Background()
	var version int
	if err := pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int / 10000").Scan(&version); err != nil {
		t.Fatal(err)
	}
	for i, sql := range blocks {
		// A block that opens with "-- PostgreSQL N+" needs that version; on an older server it
		// must fail, which keeps the marker honest.
		var need int
		if _, err := fmt.Sscanf(sql, "-- PostgreSQL %d+", &need); err == nil && version < need {
			if _, err := pool.Exec(ctx, sql); err == nil {
				t.Fatalf("README SQL block %d is marked PostgreSQL %d+ but runs on %d:\n%s", i+1, need, version, sql)
			}
			continue
		}
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("README SQL block %d fails on a migrated database: %v\n%s", i+1, err, sql)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE aggregate_type = 'order'
		AND event_type = 'order.created' AND status = 'pending'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the README's SQL: %d pending order.created events (%v), want 1", n, err)
	}
	// The endpoint added by plain SQL is one the relay accepts, enabled again, and the tenant's
	// event carries its tenant.
	var doc []byte
	if err := pool.QueryRow(ctx, `SELECT to_jsonb(e) FROM outbox_endpoints e WHERE id = 'acme'`).Scan(&doc); err != nil {
		t.Fatalf("the README's endpoint: %v", err)
	}
	var r endpoint.Row
	if err := json.Unmarshal(doc, &r); err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(nil); err != nil || r.State != endpoint.Enabled || !r.Subscribed("acme", "invoice.paid", "invoice") {
		t.Fatalf("the README's endpoint %+v: %v; want a valid enabled endpoint subscribed to acme's invoice.paid", r, err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE tenant_id = 'acme'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the README's SQL: %d events of tenant acme (%v), want 1", n, err)
	}
}
