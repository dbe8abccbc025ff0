package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/relay"
)

// TestMain starts the PostgreSQL cluster for every test of this package.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// cli runs the command line in this process, as main does, and returns what it printed and its
// exit code.
func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var outB, errB bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(&outB, outR) }()
	go func() { defer wg.Done(); _, _ = io.Copy(&errB, errR) }()
	saveOut, saveErr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = outW, errW
	code = run(args)
	os.Stdout, os.Stderr = saveOut, saveErr
	outW.Close()
	errW.Close()
	wg.Wait()
	return outB.String(), errB.String(), code
}

// squash collapses runs of blanks, so tests need not know the table's column widths.
func squash(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

// migratedDB returns a fresh migrated database's DSN and a pool on it.
func migratedDB(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	return relaytest.MigratedDB(t)
}

func mustExec(t *testing.T, pool *pgxpool.Pool, stmt string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), stmt, args...); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// startRelay runs the real relay on slot until the test ends, and waits until it streams.
func startRelay(t *testing.T, dsn string, pool *pgxpool.Pool, slot string) {
	t.Helper()
	recv := relaytest.NewReceiver("secret")
	t.Cleanup(recv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// A short status interval also bounds how long the idle stream takes to notice the cancel.
	go func() {
		done <- relay.Run(ctx, relay.Config{DSN: dsn, WebhookURL: recv.URL, Secrets: []string{"secret"},
			Slot: slot, Publication: "pub_" + slot, RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
			RequestTimeout: 2 * time.Second, StatusInterval: 200 * time.Millisecond,
			Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	relaytest.WaitFor(t, 30*time.Second, "slot active", func() bool {
		var active bool
		_ = pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		return active
	})
}

// statusDoc is the part of `status --json` the tests read.
type statusDoc struct {
	Healthy  bool             `json:"healthy"`
	Reason   string           `json:"reason"`
	Warnings []string         `json:"warnings"`
	Rows     map[string]int64 `json:"rows"`
	Slot     struct {
		Name      string  `json:"name"`
		Exists    bool    `json:"exists"`
		Active    bool    `json:"active"`
		ActivePID *int    `json:"active_pid"`
		WALStatus *string `json:"wal_status"`
		LagBytes  *int64  `json:"lag_bytes"`
	} `json:"slot"`
	OldestPending *struct {
		ID string `json:"id"`
	} `json:"oldest_pending"`
	ParkedAggregates int `json:"parked_aggregates"`
	Parked           []struct {
		AggregateID  string `json:"aggregate_id"`
		Reason       string `json:"reason"`
		ParkedEvents int    `json:"parked_events"`
	} `json:"parked"`
	Control []struct {
		Name   string `json:"name"`
		Paused bool   `json:"paused"`
		Reason string `json:"reason"`
	} `json:"control"`
	Replays []struct {
		Total int64  `json:"total"`
		State string `json:"state"`
	} `json:"replays"`
}

func statusJSONOf(t *testing.T, args ...string) (statusDoc, string, int) {
	t.Helper()
	out, errOut, code := cli(t, append([]string{"status", "--json"}, args...)...)
	var doc statusDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status --json printed no JSON (%v):\n%s\nstderr: %s", err, out, errOut)
	}
	return doc, errOut, code
}

func TestStatusOfARunningRelay(t *testing.T) {
	dsn, pool := migratedDB(t)
	slot := fmt.Sprintf("slot_%d", rand.Uint32())
	startRelay(t, dsn, pool, slot)
	if _, err := relaytest.Produce(context.Background(), pool, relaytest.Workload{Events: 5, Aggregates: 2}); err != nil {
		t.Fatal(err)
	}
	// Delivered rows are marked done shortly after delivery.
	var doc statusDoc
	relaytest.WaitFor(t, 30*time.Second, "5 rows done in the report", func() bool {
		doc, _, _ = statusJSONOf(t, "--dsn", dsn, "--slot", slot)
		return doc.Rows["done"] == 5
	})
	if !doc.Healthy || doc.Reason != "ok" || !doc.Slot.Exists || !doc.Slot.Active || doc.Slot.ActivePID == nil {
		t.Fatalf("report of a running relay: %+v", doc)
	}
	if doc.Rows["pending"] != 0 || doc.OldestPending != nil || doc.Slot.WALStatus == nil || doc.Slot.LagBytes == nil {
		t.Errorf("report: %+v", doc)
	}

	out, errOut, code := cli(t, "status", "--dsn", dsn, "--slot", slot)
	if code != 0 || errOut != "" {
		t.Fatalf("status exited %d, stderr %q; want 0 and nothing", code, errOut)
	}
	for _, want := range []string{"health healthy", "SLOT " + slot, "active yes (pid", "done 5", "oldest pending none"} {
		if !strings.Contains(squash(out), want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestStatusUnhealthyExitsOne(t *testing.T) {
	dsn, pool := migratedDB(t)
	t.Run("missing slot", func(t *testing.T) {
		out, errOut, code := cli(t, "status", "--dsn", dsn)
		if code != 1 || !strings.Contains(errOut, `slot "outbox_relay" does not exist`) {
			t.Fatalf("exit %d, stderr %q; want 1 and that the slot does not exist", code, errOut)
		}
		if !strings.Contains(out, "UNHEALTHY") || !strings.Contains(squash(out), "exists no") {
			t.Errorf("table:\n%s", out)
		}
	})
	t.Run("inactive slot", func(t *testing.T) {
		mustExec(t, pool, "SELECT pg_create_logical_replication_slot('outbox_relay', 'pgoutput')")
		doc, errOut, code := statusJSONOf(t, "--dsn", dsn)
		if code != 1 || !strings.Contains(errOut, "is inactive") {
			t.Fatalf("exit %d, stderr %q; want 1 and that the slot is inactive", code, errOut)
		}
		if doc.Healthy || !doc.Slot.Exists || doc.Slot.Active || !strings.Contains(doc.Reason, "is inactive") {
			t.Errorf("report: %+v", doc)
		}
	})
}

func TestStatusShowsParkedAggregates(t *testing.T) {
	dsn, pool := migratedDB(t)
	var first string
	err := pool.QueryRow(context.Background(), `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, last_error)
		VALUES ('order', '42', 'order.paid', '{}', 'failed', 'HTTP 422') RETURNING id::text`).Scan(&first)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, pool, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status)
		SELECT 'order', '42', 'order.shipped', '{}', 'parked' FROM generate_series(1, 3)`)
	mustExec(t, pool, `INSERT INTO outbox_parked_aggregates (aggregate_type, aggregate_id, first_event_id, reason)
		VALUES ('order', '42', $1, 'HTTP 422: {"error": "unknown order"}')`, first)

	out, _, _ := cli(t, "status", "--dsn", dsn)
	for _, want := range []string{"PARKED AGGREGATES 1", "order/42", first, `HTTP 422: {"error": "unknown order"}`,
		"failed 1", "parked 3"} {
		if !strings.Contains(squash(out), want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	doc, _, _ := statusJSONOf(t, "--dsn", dsn)
	if doc.ParkedAggregates != 1 || len(doc.Parked) != 1 || doc.Parked[0].AggregateID != "42" ||
		doc.Parked[0].Reason != `HTTP 422: {"error": "unknown order"}` || doc.Parked[0].ParkedEvents != 3 {
		t.Errorf("parked in JSON: %d %+v", doc.ParkedAggregates, doc.Parked)
	}
	if doc.Rows["failed"] != 1 || doc.Rows["parked"] != 3 || len(doc.Warnings) != 2 {
		t.Errorf("rows %v, warnings %q", doc.Rows, doc.Warnings)
	}
	doc, _, _ = statusJSONOf(t, "--dsn", dsn, "--top", "0")
	if doc.ParkedAggregates != 1 || len(doc.Parked) != 0 {
		t.Errorf("--top 0: %d parked, %d listed; want 1 and none", doc.ParkedAggregates, len(doc.Parked))
	}
}

func TestStatusWithoutSchema(t *testing.T) {
	out, errOut, code := cli(t, "status", "--dsn", pgtest.NewDB(t))
	if code != 1 || out != "" || !strings.Contains(errOut, "run `outbox-relay migrate`") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 1, nothing, and to run migrate", code, out, errOut)
	}
}

func TestStatusUsage(t *testing.T) {
	if _, _, code := cli(t, "status", "--dsn", "postgres://localhost/x", "--top", "-1"); code != exitUsage {
		t.Errorf("--top -1: exit %d, want %d", code, exitUsage)
	}
	if _, _, code := cli(t, "status", "--nope"); code != exitUsage {
		t.Errorf("unknown flag: exit %d, want %d", code, exitUsage)
	}
}
