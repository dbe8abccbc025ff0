// Package relay holds the relay's proofs that need a broker or the CloudEvents SDK (an
// in-process nats-server, franz-go's kfake, the SDK's reader): they run the relay binary the
// way an operator does, by its flags, so they need nothing of package relay's own test code.
// The relay's other tests live beside it, in the root module.
package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m, pgtest.Options{})
	relaytest.RemoveRelayBinary()
	os.Exit(code)
}

// secret signs the webhook requests of the CloudEvents tests.
const secret = "test-secret"

// poisonAgg is the aggregate whose event a broker refuses in the poison test.
const poisonAgg = "order/7"

// env is one test's database, pool and slot.
type env struct {
	t    *testing.T
	dsn  string
	pool *pgxpool.Pool
	slot string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := relaytest.Pool(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &env{t: t, dsn: dsn, pool: pool, slot: fmt.Sprintf("slot_%d", rand.Uint32())}
}

// webhookProcess starts the relay binary against this env's database, delivering to the
// webhook at url (signed with secret) with the extra flags args, and waits for its slot: rows
// committed before the slot exists are backfill's, not the stream's.
func (e *env) webhookProcess(url string, args ...string) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(relaytest.RelayBinary(e.t), append([]string{"run", "--slot", e.slot, "--publication", "pub_" + e.slot,
		"--metrics-addr", "", "--retry-min", "10ms", "--retry-max", "200ms", "--log-format", "json", "--log-level", "warn"},
		args...)...)
	cmd.Env = append(os.Environ(), "DB_DSN="+e.dsn, "WEBHOOK_URL="+url, "WEBHOOK_SECRET="+secret)
	cmd.Stderr = testWriter{e.t}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	e.waitSlot()
	return cmd
}

// waitSlot waits until the relay created this env's slot.
func (e *env) waitSlot() {
	e.t.Helper()
	waitFor(e.t, 60*time.Second, "slot created", func() bool {
		var n int
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&n)
		return n == 1
	})
}

func (e *env) slotLSNs() (confirmed, current int64) {
	e.t.Helper()
	err := e.pool.QueryRow(context.Background(), `
		SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&confirmed, &current)
	if err != nil {
		e.t.Fatal(err)
	}
	return confirmed, current
}

// statusCounts counts agg's rows by status.
func (e *env) statusCounts(agg string) map[string]int {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT status, count(*)::int FROM outbox_events
		WHERE aggregate_type || '/' || aggregate_id = $1 GROUP BY status`, agg)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			e.t.Fatal(err)
		}
		out[s] = n
	}
	return out
}

func requireOK(t *testing.T, rep relaytest.Report) {
	t.Helper()
	t.Log(rep)
	if !rep.OK() {
		t.Fatalf("guarantee broken: %s; lost %v; phantoms %v; order %v", rep, head(rep.Lost), head(rep.Phantoms),
			head(rep.OrderViolations))
	}
}

func head(s []string) []string { return s[:min(len(s), 5)] }

var waitFor = relaytest.WaitFor

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("relay: %s", p)
	return len(p), nil
}
