package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m, pgtest.Options{})
	relaytest.RemoveRelayBinary() // what the tests that run the binary built
	os.Exit(code)
}

const secret = "test-secret"

// env is one test's database, pool and receiver.
type env struct {
	t    *testing.T
	dsn  string
	pool *pgxpool.Pool
	recv *relaytest.Receiver
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
	recv := relaytest.NewReceiver(secret)
	t.Cleanup(recv.Close)
	return &env{t: t, dsn: dsn, pool: pool, recv: recv, slot: fmt.Sprintf("slot_%d", rand.Uint32())}
}

func (e *env) config() Config {
	return Config{
		DSN: e.dsn, WebhookURL: e.recv.URL, Secrets: []string{secret},
		Slot: e.slot, Publication: "pub_" + e.slot,
		RetryMin: 10 * time.Millisecond, RetryMax: 200 * time.Millisecond, RequestTimeout: 2 * time.Second,
		Logger: zerolog.New(zerolog.NewTestWriter(e.t)).Level(testLogLevel),
	}
}

// running is a relay started in this process.
type running struct {
	cancel context.CancelFunc
	done   chan error
	reg    *prometheus.Registry
}

func (e *env) start(mutate func(*Config)) *running {
	e.t.Helper()
	r := e.startNoWait(mutate)
	e.waitSlot()
	return r
}

// waitSlot waits until the relay has created the test's slot and the slot has reached its
// consistent point (confirmed_flush_lsn is set then). Rows committed before that are not in the
// stream (that is backfill's job), so tests write only once it has. The slot shows in
// pg_replication_slots as soon as its creation starts, which waits for the transactions running
// in the whole cluster to end: with tests running in parallel, a write made as soon as the slot
// shows could commit before that point and reach the relay by backfill instead.
func (e *env) waitSlot() {
	e.t.Helper()
	waitFor(e.t, 30*time.Second, "slot created", func() bool {
		var n int
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots
			WHERE slot_name = $1 AND confirmed_flush_lsn IS NOT NULL`, e.slot).Scan(&n)
		return n == 1
	})
}

// stop cancels the relay and waits for it to return; it is safe to call twice.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop within 30s")
	}
	return nil
}

func (e *env) produce(w relaytest.Workload) relaytest.Result {
	e.t.Helper()
	res, err := relaytest.Produce(context.Background(), e.pool, w)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// waitDelivered waits until every committed event was accepted at least once.
func (e *env) waitDelivered(res relaytest.Result, within time.Duration) relaytest.Report {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		rep := relaytest.Check(res, e.recv.Deliveries())
		if len(rep.Lost) == 0 || time.Now().After(deadline) {
			return rep
		}
		time.Sleep(50 * time.Millisecond)
	}
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

func requireOK(t *testing.T, rep relaytest.Report) {
	t.Helper()
	t.Log(rep)
	if !rep.OK() {
		t.Fatalf("guarantee broken: %s; lost %v; phantoms %v; order %v", rep, head(rep.Lost), head(rep.Phantoms),
			head(rep.OrderViolations))
	}
}

func head(s []string) []string { return s[:min(len(s), 5)] }

// 10,000 events over 100 aggregates in multi-event transactions, some rolled back, with a
// receiver failing 10% at random: all delivered, order per aggregate kept, no rolled-back event.
func TestDeliversEverythingInOrderDespiteFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.recv.SetFail(func(*http.Request) int {
		if rand.Float64() < 0.10 {
			return http.StatusInternalServerError
		}
		return 0
	})
	r := e.start(nil)
	res := e.produce(relaytest.Workload{Events: 10000, Aggregates: 100, MaxTxSize: 20, Rollback: 0.05, Writers: 4})
	if len(res.RolledBack) == 0 {
		t.Fatal("workload rolled nothing back")
	}
	rep := e.waitDelivered(res, 2*time.Minute)
	requireOK(t, rep)
	if e.recv.BadSignatures() != 0 {
		t.Fatalf("%d requests failed signature verification", e.recv.BadSignatures())
	}
	// The slot confirms past the whole workload once it is delivered.
	_, end := e.slotLSNs()
	waitFor(t, 10*time.Second, "slot confirmed past the workload", func() bool {
		c, _ := e.slotLSNs()
		return c >= end
	})
	// Status marks: every row ends done, with retries = attempts - 1.
	waitFor(t, 10*time.Second, "rows marked done", func() bool {
		var pending int
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events WHERE status <> 'done'`).Scan(&pending)
		if pending > 0 {
			t.Logf("pending %d", pending)
		}
		return pending == 0
	})
	var retried int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events WHERE retries > 0`).Scan(&retried)
	if retried == 0 {
		t.Fatal("10% failures but no row records a retry")
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// waitFor is relaytest.WaitFor, kept under this name so the package's many callers stay as
// they are.
var waitFor = relaytest.WaitFor

var _ = errors.New

var testLogLevel = func() zerolog.Level {
	if os.Getenv("RELAY_TEST_LOG") != "" {
		return zerolog.DebugLevel
	}
	return zerolog.WarnLevel
}()

// A trace context given to outbox.Enqueue arrives as the webhook's traceparent.
func TestTraceParentReachesTheWebhook(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(nil)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	id, err := outbox.Enqueue(context.Background(), e.pool, outbox.Event{AggregateType: "order", AggregateID: "1",
		EventType: "order.created", Payload: map[string]int{"seq": 1}, TraceParent: tp})
	if err != nil {
		t.Fatal(err)
	}
	res := relaytest.Result{Committed: []relaytest.Committed{{ID: id.String(), Aggregate: "order/1", Seq: 1}}}
	requireOK(t, e.waitDelivered(res, 10*time.Second))
	if got := e.recv.Deliveries()[0].Trace; got != tp {
		t.Fatalf("traceparent %q, want %q", got, tp)
	}
}

// flagFieldsCleared returns c with the default-pipeline fields that e.config sets cleared when
// c lists Pipelines: New refuses the two forms mixed.
func flagFieldsCleared(c Config) Config {
	if len(c.Pipelines) == 0 {
		return c
	}
	c.WebhookURL, c.Secrets, c.Slot, c.Publication = "", nil, "", ""
	c.RetryMin, c.RetryMax, c.RequestTimeout = 0, 0, 0
	return c
}
