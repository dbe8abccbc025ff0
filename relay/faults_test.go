package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// metric reads one series from a relay's registry.
func (r *running) metric(t *testing.T, name string, label ...string) float64 {
	t.Helper()
	families, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if len(label) == 2 && !hasLabel(m, label[0], label[1]) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1 // not registered yet: the relay is still starting
}

// statusRounds waits until the relay has sent n more standby status updates: each is a chance to
// confirm a position, so a negative assertion about confirmation made after it is not vacuous.
func (r *running) statusRounds(t *testing.T, n int) {
	t.Helper()
	from := r.metric(t, "outbox_relay_status_updates_total")
	waitFor(t, 30*time.Second, fmt.Sprintf("%d more status updates", n), func() bool {
		return r.metric(t, "outbox_relay_status_updates_total") >= from+float64(n)
	})
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// lastCommitLSN is the highest commit LSN among deliveries, read from X-Event-Sequence.
func lastCommitLSN(t *testing.T, ds []relaytest.Delivery) int64 {
	t.Helper()
	var last int64
	for _, d := range ds {
		lsn, err := strconv.ParseInt(d.Sequence[:16], 16, 64)
		if err != nil {
			t.Fatalf("X-Event-Sequence %q: %v", d.Sequence, err)
		}
		last = max(last, lsn)
	}
	return last
}

func (e *env) currentLSN() int64 {
	var lsn int64
	if err := e.pool.QueryRow(context.Background(), `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&lsn); err != nil {
		e.t.Fatal(err)
	}
	return lsn
}

// The slot's confirmed LSN never passes an undelivered event, and moves past it once delivered.
func TestConfirmsOnlyAfterDelivery(t *testing.T) {
	// Not parallel: compares the slot's confirmed position with the cluster's WAL position, which other tests move while they run.
	e := newEnv(t)
	r := e.start(func(c *Config) { c.RequestTimeout = 30 * time.Second; c.StatusInterval = 200 * time.Millisecond })
	e.recv.Hang()
	before := e.currentLSN()
	res := e.produce(relaytest.Workload{Events: 5, Aggregates: 5, MaxTxSize: 1})
	after := e.currentLSN()
	waitFor(t, 10*time.Second, "requests in flight", func() bool { return e.recv.Requests() >= 1 })
	// Several status updates go out while the receiver holds every request; the server has
	// applied all but perhaps the last by the time the slot is read.
	r.statusRounds(t, 4)
	if confirmed, _ := e.slotLSNs(); confirmed > before {
		t.Fatalf("slot confirmed %d, past undelivered events that start after %d", confirmed, before)
	}
	e.recv.Unhang()
	requireOK(t, e.waitDelivered(res, 30*time.Second))
	waitFor(t, 5*time.Second, "confirmation after delivery", func() bool {
		c, _ := e.slotLSNs()
		return c >= after
	})
	if got := r.metric(t, "outbox_relay_events_delivered_total"); got != 5 {
		t.Fatalf("events_delivered_total = %v, want 5", got)
	}
}

// A quiet outbox while another table writes ~200 MB of WAL: the slot keeps little WAL.
func TestIdleOutboxDoesNotPinWAL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(nil)
	res := e.produce(relaytest.Workload{Events: 10, Aggregates: 2, MaxTxSize: 3})
	requireOK(t, e.waitDelivered(res, 30*time.Second))
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `CREATE TABLE other (id bigint, pad text)`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ { // 20 × 10 MB
		if _, err := e.pool.Exec(ctx, `INSERT INTO other SELECT g, repeat('x', 1000) FROM generate_series(1, 10000) g`); err != nil {
			t.Fatal(err)
		}
	}
	const limit = 32 << 20
	var retained int64
	waitFor(t, 60*time.Second, "retained WAL under 32 MB", func() bool {
		// A checkpoint logs the running-transactions record that lets restart_lsn move.
		_, _ = e.pool.Exec(ctx, "CHECKPOINT")
		_ = e.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint
			FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&retained)
		return retained < limit
	})
	t.Logf("retained WAL after 200 MB of other writes: %d bytes", retained)
}

// wal_sender_timeout=4s and a receiver that hangs 12s: the server does not cut the relay off.
func TestNotCutOffWhileDeliveryHangs(t *testing.T) {
	// Not parallel: reads the shared cluster's log, which parallel tests would crowd.
	e := newEnv(t)
	ctx := context.Background()
	dbName := e.dbName()
	if _, err := e.pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{dbName}.Sanitize()+` SET wal_sender_timeout = '4s'`); err != nil {
		t.Fatal(err)
	}
	r := e.start(func(c *Config) { c.RequestTimeout = 30 * time.Second })
	var pid int
	waitFor(t, 10*time.Second, "a walsender streams", func() bool { pid, _ = e.walSender(); return pid != 0 })
	e.recv.Hang()
	res := e.produce(relaytest.Workload{Events: 20, Aggregates: 4, MaxTxSize: 5})
	time.Sleep(12 * time.Second)
	e.recv.Unhang()
	requireOK(t, e.waitDelivered(res, 30*time.Second))
	if n := r.metric(t, "outbox_relay_reconnects_total"); n != 0 {
		t.Fatalf("relay reconnected %v times: the server cut it off", n)
	}
	// Only this relay's walsender counts: other tests (a frozen connection) time theirs out.
	for _, line := range strings.Split(pgtest.Shared(t).LogTail(400), "\n") {
		if strings.Contains(line, fmt.Sprintf("[%d] ", pid)) && strings.Contains(line, "replication timeout") {
			t.Fatalf("server log shows a replication timeout: %s", line)
		}
	}
}

func (e *env) dbName() string {
	var name string
	if err := e.pool.QueryRow(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
		e.t.Fatal(err)
	}
	return name
}

// A receiver that blocks everything: the buffer stays bounded, reading pauses, and it resumes
// when the receiver recovers.
func TestBackpressureBoundsTheBuffer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const maxEvents = 200
	r := e.start(func(c *Config) {
		c.MaxBufferedEvents = maxEvents
		c.MaxInFlight = 8
		c.RequestTimeout = time.Minute
		c.StatusInterval = 200 * time.Millisecond
	})
	e.recv.Hang()
	res := e.produce(relaytest.Workload{Events: 5000, Aggregates: 50, MaxTxSize: 10})
	waitFor(t, 15*time.Second, "reading paused", func() bool { return r.metric(t, "outbox_relay_read_paused") == 1 })
	// The paused loop stays alive (it sends status updates); had it gone on reading, more events
	// would have arrived meanwhile.
	r.statusRounds(t, 3)
	got := r.metric(t, "outbox_relay_events_received_total")
	if got > maxEvents+10 { // a transaction can overshoot by its own size (at most 10 here)
		t.Fatalf("received %v events with a %d-event buffer and a blocked receiver", got, maxEvents)
	}
	e.recv.Unhang()
	requireOK(t, e.waitDelivered(res, time.Minute))
}

// An immediate (crash) restart of PostgreSQL mid-stream: nothing lost, no operator step.
func TestServerCrashRestartMidStream(t *testing.T) {
	// Not parallel: restarts the shared cluster.
	e := newEnv(t)
	slow := func(*http.Request) int { time.Sleep(time.Millisecond); return 0 }
	e.recv.SetFail(slow)
	r := e.start(nil)
	res := e.produce(relaytest.Workload{Events: 3000, Aggregates: 30, MaxTxSize: 10})
	waitFor(t, 20*time.Second, "some deliveries", func() bool { return e.recv.Unique() > 300 })
	e.pool.Reset()
	if err := pgtest.Shared(t).Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	requireOK(t, e.waitDelivered(res, time.Minute))
	if r.metric(t, "outbox_relay_reconnects_total") == 0 {
		t.Fatal("no reconnect recorded: the restart did not happen mid-stream")
	}
	t.Logf("duplicates after a crash restart: %d", relaytest.Check(res, e.recv.Deliveries()).Duplicates)
}

// A second relay on the same slot stands by and takes over within seconds when the first stops.
func TestStandbyTakesOver(t *testing.T) {
	// Not parallel: reads the shared cluster's log, which parallel tests would crowd.
	e := newEnv(t)
	first := e.start(nil)
	res1 := e.produce(relaytest.Workload{Events: 50, Aggregates: 5, MaxTxSize: 5})
	requireOK(t, e.waitDelivered(res1, 30*time.Second))
	second := e.start(nil)
	waitFor(t, 10*time.Second, "second relay standing by", func() bool {
		return second.metric(t, "outbox_relay_streaming") == 0 && first.metric(t, "outbox_relay_streaming") == 1
	})
	// The standby retries the slot: wait until the server has refused it again (its log says the
	// slot is active), so the check below follows a real attempt to take over.
	refused := func() int {
		return strings.Count(pgtest.Shared(t).LogTail(2000), fmt.Sprintf(`replication slot "%s" is active for PID`, e.slot))
	}
	seen := refused()
	waitFor(t, 30*time.Second, "the standby refused the slot again", func() bool { return refused() > seen })
	if second.metric(t, "outbox_relay_streaming") != 0 {
		t.Fatal("two relays stream the same slot")
	}
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	waitFor(t, 15*time.Second, "takeover", func() bool { return second.metric(t, "outbox_relay_streaming") == 1 })
	t.Logf("takeover %s after the leader stopped", time.Since(stopped).Round(time.Millisecond))
	res2 := e.produce(relaytest.Workload{Events: 50, Aggregates: 5, MaxTxSize: 5, Type: "invoice"})
	all := relaytest.Result{Committed: append(res1.Committed, res2.Committed...)}
	requireOK(t, e.waitDelivered(all, 30*time.Second))
}

// SIGTERM-like stop: in-flight deliveries finish, the delivered position is confirmed, and Run
// returns nil.
func TestGracefulStopConfirmsWhatWasDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.start(nil)
	res := e.produce(relaytest.Workload{Events: 200, Aggregates: 10, MaxTxSize: 5})
	requireOK(t, e.waitDelivered(res, 30*time.Second))
	end := lastCommitLSN(t, e.recv.Deliveries())
	if err := r.stop(t); err != nil {
		t.Fatalf("Run returned %v on stop", err)
	}
	var active bool
	var confirmed int64
	err := e.pool.QueryRow(context.Background(), `SELECT active, pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&active, &confirmed)
	if err != nil {
		t.Fatal(err)
	}
	if confirmed <= end {
		t.Fatalf("after a clean stop the slot is at %d, not past the last delivered commit %d", confirmed, end)
	}
	waitFor(t, 5*time.Second, "slot released", func() bool {
		_ = e.pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&active)
		return !active
	})
}

// Retry-After from the receiver sets the next attempt's delay.
func TestRetryAfterIsHonoured(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	var first time.Time
	calls := 0
	e.recv.SetFail(func(req *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			first = time.Now()
			return http.StatusTooManyRequests
		}
		return 0
	})
	e.recv.SetHeader("Retry-After", "1")
	e.start(func(c *Config) { c.RetryMin = 10 * time.Millisecond; c.RetryMax = 5 * time.Second })
	res := e.produce(relaytest.Workload{Events: 1, Aggregates: 1, MaxTxSize: 1})
	requireOK(t, e.waitDelivered(res, 20*time.Second))
	d := e.recv.Deliveries()[0]
	mu.Lock()
	defer mu.Unlock()
	if gap := d.At.Sub(first); gap < 900*time.Millisecond {
		t.Fatalf("second attempt %s after a 429 with Retry-After: 1", gap)
	}
	if d.Attempt != 2 {
		t.Fatalf("delivered on attempt %d, want 2", d.Attempt)
	}
}

// Misconfigurations fail fast with an error that names the fix.
func TestSetupErrorsNameTheFix(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	ctx := context.Background()
	t.Run("missing table", func(t *testing.T) {
		dsn := pgtest.NewDB(t)
		_, err := cdc.Setup(ctx, dsn, "s_missing", "p_missing", cdc.SetupOptions{})
		wantErr(t, err, cdc.ErrNoOutboxTable, "outbox-relay migrate")
	})
	t.Run("role without REPLICATION", func(t *testing.T) {
		dsn := pgtest.NewDB(t)
		if _, err := migrations.Up(ctx, dsn); err != nil {
			t.Fatal(err)
		}
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, `DROP ROLE IF EXISTS plain_app; CREATE ROLE plain_app LOGIN`)
		defer conn.Exec(ctx, `DROP OWNED BY plain_app; DROP ROLE plain_app`)
		plain := strings.Replace(dsn, "postgres://postgres@", "postgres://plain_app@", 1)
		_, err = cdc.Setup(ctx, plain, "s_role", "p_role", cdc.SetupOptions{})
		wantErr(t, err, cdc.ErrNoReplication, "ALTER ROLE")
	})
	t.Run("wal_level replica", func(t *testing.T) {
		c, err := pgtest.Start(ctx, pgtest.Options{Settings: map[string]string{"wal_level": "replica"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = cdc.Setup(ctx, c.DSN("postgres"), "s", "p", cdc.SetupOptions{})
		wantErr(t, err, cdc.ErrWalLevel, "restart")
	})
	t.Run("invalidated slot", func(t *testing.T) {
		dsn, pool := clusterWithSlot(t, "doomed")
		invalidate(t, pool, "doomed")
		_, err := cdc.Setup(ctx, dsn, "doomed", "pub", cdc.SetupOptions{})
		wantErr(t, err, cdc.ErrSlotInvalid, "pg_drop_replication_slot")
	})
}

func wantErr(t *testing.T, err, target error, fix string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want %v", err, target)
	}
	if !strings.Contains(err.Error(), fix) {
		t.Fatalf("error %q does not name the fix (%q)", err, fix)
	}
	t.Log(err)
}

// An idle relay stops promptly on cancellation, not at its next status update.
func TestIdleRelayStopsPromptly(t *testing.T) {
	// Not parallel: bounds how long a stop takes.
	e := newEnv(t)
	r := e.start(func(c *Config) { c.StatusInterval = 30 * time.Second })
	res := e.produce(relaytest.Workload{Events: 1, Aggregates: 1, MaxTxSize: 1})
	requireOK(t, e.waitDelivered(res, 10*time.Second))
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("stop took %s with a 30s status interval", took)
	}
}

// A relay started while PostgreSQL is down waits for it instead of exiting, then streams; its
// /healthz and /readyz answer meanwhile, although not even the schema of its tables could be
// resolved yet.
func TestStartWhileTheServerIsDown(t *testing.T) {
	// Not parallel: stops the shared cluster.
	e := newEnv(t)
	c := pgtest.Shared(t)
	e.pool.Reset()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.Registerer = nil
	var addr atomic.Value
	withHTTP(&addr)(&cfg)
	var logs relaytest.SyncBuffer
	cfg.Logger = zerolog.New(zerolog.MultiLevelWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.WarnLevel)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	// Two failed attempts logged: the relay has had the chance to give up, and has not.
	waitFor(t, 30*time.Second, "two retries while the server is down", func() bool {
		return strings.Count(logs.String(), "; retrying") >= 2 // as "database not ready" or with the cause and the fix
	})
	select {
	case err := <-done:
		t.Fatalf("relay exited while the server was down: %v", err)
	default:
	}
	if code, body := get(t, &addr, "/healthz"); code != 200 {
		t.Fatalf("/healthz = %d (%s) while the server is down, want 200", code, body)
	}
	if code, body := get(t, &addr, "/readyz"); code != 503 || !strings.Contains(body, "resolving the schema") {
		t.Fatalf("/readyz = %d %q while the server is down, want 503 saying the start resolves the schema", code, body)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.waitSlot()
	res := e.produce(relaytest.Workload{Events: 20, Aggregates: 4, MaxTxSize: 3})
	requireOK(t, e.waitDelivered(res, 30*time.Second))
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// clusterWithSlot starts a migrated cluster of its own whose slots may keep only 1 MB of WAL,
// creates slot (publication "pub"), and returns the DSN and a pool; both end with the test.
func clusterWithSlot(t *testing.T, slot string) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	c, err := pgtest.Start(ctx, pgtest.Options{Settings: map[string]string{
		"max_slot_wal_keep_size": "1MB", "max_wal_size": "32MB", "min_wal_size": "32MB"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	dsn := c.DSN("postgres")
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	if _, err := cdc.Setup(ctx, dsn, slot, "pub", cdc.SetupOptions{}); err != nil {
		t.Fatal(err)
	}
	pool, err := relaytest.Pool(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return dsn, pool
}

// invalidate writes WAL and checkpoints until the slot exceeds max_slot_wal_keep_size and is lost.
func invalidate(t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Helper()
	ctx := context.Background()
	waitFor(t, 60*time.Second, "slot invalidated", func() bool {
		_, _ = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS junk (pad text);
			INSERT INTO junk SELECT repeat('x', 1000) FROM generate_series(1, 5000); SELECT pg_switch_wal(); CHECKPOINT`)
		var status string
		_ = pool.QueryRow(ctx, `SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&status)
		return status == "lost"
	})
}
