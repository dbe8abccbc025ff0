package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// refused runs the relay with cfg and returns the error it exits with; a relay that is still
// running after a generous bound failed the test (it accepted a database it cannot serve).
func refused(t *testing.T, cfg Config) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("relay exited without an error")
		}
		t.Log(err)
		return err
	case <-time.After(30 * time.Second):
		cancel()
		<-done
		t.Fatal("relay started on a database it cannot serve; it should have refused")
	}
	return nil
}

// leftBehind lists the slot and publication of e that exist.
func (e *env) leftBehind() []string {
	e.t.Helper()
	var out []string
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	if n > 0 {
		out = append(out, "slot "+e.slot)
	}
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_publication WHERE pubname = $1`, "pub_"+e.slot).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	if n > 0 {
		out = append(out, "publication pub_"+e.slot)
	}
	return out
}

// unmigratedEnv is an env on a fresh database that setup prepares instead of migrating it.
func unmigratedEnv(t *testing.T, setup string) *env {
	t.Helper()
	dsn := pgtest.NewDB(t)
	pool, err := relaytest.Pool(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), setup); err != nil {
		t.Fatal(err)
	}
	recv := relaytest.NewReceiver(secret)
	t.Cleanup(recv.Close)
	return &env{t: t, dsn: dsn, pool: pool, recv: recv, slot: fmt.Sprintf("slot_%d", rand.Uint32())}
}

// Issue: `run` on a database whose outbox_events is another application's table created the
// publication and the slot, then looped on decode errors. It must refuse before creating
// anything, naming the way out.
func TestRefusesAForeignOutboxTable(t *testing.T) {
	t.Parallel()
	e := unmigratedEnv(t, `CREATE TABLE outbox_events (id bigserial PRIMARY KEY, topic text NOT NULL, body jsonb)`)
	err := refused(t, e.config())
	if !errors.Is(err, cdc.ErrSchema) || !strings.Contains(err.Error(), "RENAME") {
		t.Fatalf("error %q does not say the table is foreign and how to get out of the way", err)
	}
	if left := e.leftBehind(); len(left) > 0 {
		t.Fatalf("refused start left %v behind", left)
	}
}

// A database migrated to an older version than the binary needs is refused, naming migrate.
func TestRefusesAnOldSchema(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// What a database migrated by an older release (before 00006) looks like.
	if _, err := e.pool.Exec(context.Background(), `DROP TABLE outbox_endpoint_outages; DROP TABLE outbox_portal_sessions;
		DROP TABLE outbox_api_idempotency; DROP TABLE outbox_api_audit; ALTER TABLE outbox_replays DROP COLUMN event_id;
		DROP TABLE outbox_event_types; DROP TABLE outbox_deliveries; DROP TABLE outbox_delivery_attempts; DROP TABLE outbox_endpoint_backlog;
		DROP INDEX IF EXISTS outbox_replays_open; DROP TABLE outbox_endpoint_status; DROP TABLE outbox_endpoint_versions;
		DROP TABLE outbox_endpoints; DROP FUNCTION outbox_endpoints_emit(); ALTER TABLE outbox_events DROP COLUMN tenant_id;
		DROP TABLE outbox_slot_location; DROP TABLE outbox_reshard; DROP TABLE outbox_replays; DROP TABLE outbox_pipeline_control;
		DROP TABLE outbox_pipeline_events;
		ALTER TABLE outbox_parked_aggregates DROP CONSTRAINT outbox_parked_aggregates_pkey;
		ALTER TABLE outbox_parked_aggregates ADD PRIMARY KEY (aggregate_type, aggregate_id);
		ALTER TABLE outbox_parked_aggregates DROP COLUMN own_state, DROP COLUMN pipeline;
		DROP TABLE outbox_slots;
		ALTER TABLE outbox_events DROP COLUMN insert_seq; DELETE FROM outbox_relay_schema WHERE version_id >= 6`); err != nil {
		t.Fatal(err)
	}
	err := refused(t, e.config())
	if !errors.Is(err, cdc.ErrSchema) || !strings.Contains(err.Error(), "outbox-relay migrate") {
		t.Fatalf("error %q does not name `outbox-relay migrate`", err)
	}
	if left := e.leftBehind(); len(left) > 0 {
		t.Fatalf("refused start left %v behind", left)
	}
	// Positive control: after migrate, the same configuration starts.
	if _, err := migrations.Up(context.Background(), e.dsn); err != nil {
		t.Fatal(err)
	}
	e.start(nil)
}

// relayRole creates a login role with REPLICATION (dropped when the test ends) and returns a
// DSN of e's database for it. The publication is created by the table's owner, as a DBA would.
func (e *env) relayRole(name string) string {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, fmt.Sprintf(`DROP ROLE IF EXISTS %[1]s; CREATE ROLE %[1]s LOGIN REPLICATION;
		CREATE PUBLICATION pub_%[2]s FOR TABLE outbox_events WITH (publish = 'insert')`, name, e.slot)); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_, _ = e.pool.Exec(context.Background(), fmt.Sprintf(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '%[1]s';
			DROP OWNED BY %[1]s; DROP ROLE %[1]s`, name))
	})
	if !strings.Contains(e.dsn, "postgres://postgres@") {
		e.t.Fatalf("unexpected DSN form %s", e.dsn)
	}
	return strings.Replace(e.dsn, "postgres://postgres@", "postgres://"+name+"@", 1)
}

// Issue: a role with REPLICATION but only SELECT on outbox_events passed the start checks, then
// failed every done-mark. It must be refused with the exact GRANT statements, and those
// statements must be enough.
func TestRefusesARoleWithoutTheWritesItNeeds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	role := fmt.Sprintf("ro_%d", rand.Uint32())
	cfg := e.config()
	cfg.DSN = e.relayRole(role)
	if _, err := e.pool.Exec(context.Background(), "GRANT SELECT ON outbox_events TO "+role); err != nil {
		t.Fatal(err)
	}
	err := refused(t, cfg)
	want := `GRANT UPDATE ON "public"."outbox_events" TO "` + role + `";`
	if !errors.Is(err, cdc.ErrNoPrivilege) || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name %q", err, want)
	}
	if left := e.leftBehind(); len(left) != 1 { // the DBA's publication, and no slot
		t.Fatalf("refused start left %v, want only the publication created beforehand", left)
	}
	// The statements in the message are exactly what is missing.
	stmts := err.Error()[strings.Index(err.Error(), "GRANT "):]
	if _, err := e.pool.Exec(context.Background(), stmts); err != nil {
		t.Fatalf("run the GRANTs %q: %v", stmts, err)
	}
	e.startWith(cfg)
	res := e.produce(relaytest.Workload{Events: 10, Aggregates: 2, MaxTxSize: 3})
	requireOK(t, e.waitDelivered(res, 30*time.Second))
}

// startWith starts the relay with cfg as it is, and waits for its slot.
func (e *env) startWith(cfg Config) *running {
	e.t.Helper()
	return e.start(func(c *Config) { *c = cfg })
}
