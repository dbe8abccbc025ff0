package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// newEnvIn is newEnv with the relay's tables in schema s (migrate --schema s), the search_path
// left at public.
func newEnvIn(t *testing.T, s string) *env {
	t.Helper()
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := migrations.UpWith(ctx, dsn, migrations.Options{Schema: s}); err != nil {
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

// A role without USAGE on the relay's schema sees none of its tables: the start names the
// GRANT on the schema with those on the tables, and they are enough.
func TestRefusesARoleWithoutUsageOnTheSchema(t *testing.T) {
	t.Parallel()
	e := newEnvIn(t, "app")
	role := fmt.Sprintf("nousage_%d", rand.Uint32())
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, fmt.Sprintf(`CREATE ROLE %[1]s LOGIN REPLICATION;
		CREATE PUBLICATION pub_%[2]s FOR TABLE app.outbox_events WITH (publish = 'insert')`, role, e.slot)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.pool.Exec(context.Background(), fmt.Sprintf(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE usename = '%[1]s'; DROP OWNED BY %[1]s; DROP ROLE %[1]s`, role))
	})
	cfg := e.config()
	cfg.Schema = "app"
	cfg.DSN = strings.Replace(e.dsn, "postgres://postgres@", "postgres://"+role+"@", 1)
	err := refused(t, cfg)
	want := `GRANT USAGE ON SCHEMA "app" TO "` + role + `"; GRANT SELECT, UPDATE ON "app"."outbox_events" TO "` + role + `";`
	if !errors.Is(err, cdc.ErrNoPrivilege) || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name %q", err, want)
	}
	stmts := err.Error()[strings.Index(err.Error(), "GRANT "):]
	if _, err := e.pool.Exec(ctx, stmts); err != nil {
		t.Fatalf("run the GRANTs %q: %v", stmts, err)
	}
	e.startWith(cfg)
	res := e.produce(relaytest.Workload{Events: 10, Aggregates: 2, MaxTxSize: 3, Schema: "app"})
	requireOK(t, e.waitDelivered(res, 30*time.Second))
}

// A publication of the relay's name that carries another schema's outbox_events (made for the
// relay of that schema) is refused: this relay would stream nothing from it.
func TestRefusesAPublicationOfAnotherSchema(t *testing.T) {
	t.Parallel()
	e := newEnvIn(t, "app")
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `CREATE TABLE public.outbox_events (LIKE app.outbox_events INCLUDING ALL);
		CREATE PUBLICATION pub_`+e.slot+` FOR TABLE public.outbox_events WITH (publish = 'insert')`); err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.Schema = "app"
	err := refused(t, cfg)
	if !errors.Is(err, cdc.ErrPublicationTable) || !strings.Contains(err.Error(), `publishes public.outbox_events, not "app"."outbox_events"`) {
		t.Fatalf("error %v; want ErrPublicationTable naming both tables", err)
	}
	if left := e.leftBehind(); len(left) != 1 {
		t.Fatalf("refused start left %v, want only the publication made beforehand", left)
	}
	// Positive control: a publication of its own, and it runs.
	cfg.Publication = "own_" + e.slot
	e.startWith(cfg)
	res := e.produce(relaytest.Workload{Events: 10, Aggregates: 2, MaxTxSize: 3, Schema: "app"})
	requireOK(t, e.waitDelivered(res, 30*time.Second))
}

// With the relay's tables in app (--schema app) while the search_path's public holds a complete
// set of them too (with pending rows of its own), decoding on a standby and moving the slot back
// to the primary use app's tables only: a fresh standby slot backfills app's pending rows (read
// on the standby, recorded in app on the primary), where the slot lives is recorded in app, and
// public's tables are never read or written (its pending rows are never delivered).
func TestStandbySlotAndItsMoveKeepToTheRelaysSchema(t *testing.T) {
	t.Parallel()
	requireVersion(t, cdc.StandbyDecodingVersion, "logical decoding on a standby")
	ctx := context.Background()
	primary, standby, db := primaryWithStandby(t, nil, nil) // migrated in public: the decoy
	if _, err := migrations.UpWith(ctx, primary.DSN(db), migrations.Options{Schema: "app"}); err != nil {
		t.Fatal(err)
	}
	pool, standbyPool := clusterPool(t, primary.DSN(db)), clusterPool(t, standby.DSN(db))
	recv := relaytest.NewReceiver(secret)
	t.Cleanup(recv.Close)
	e := &env{t: t, dsn: primary.DSN(db), pool: pool, recv: recv, slot: fmt.Sprintf("slot_%d", rand.Uint32())}
	decoys := e.produce(relaytest.Workload{Events: 30, Aggregates: 5, MaxTxSize: 3, Type: "decoy"})
	all := e.produce(relaytest.Workload{Events: 200, Aggregates: 20, MaxTxSize: 3, Schema: "app"})

	r := e.startNoWait(func(c *Config) { c.Schema, c.ReplicationDSN = "app", standby.DSN(db) })
	waitFor(t, 2*time.Minute, "the slot streaming on the standby", func() bool { _, a := slotState(standbyPool, e.slot); return a })
	live := e.produce(relaytest.Workload{Events: 100, Aggregates: 20, MaxTxSize: 3, Schema: "app", Type: "invoice"})
	all.Committed = append(all.Committed, live.Committed...)
	requireOK(t, e.waitDelivered(all, 2*time.Minute)) // the backfill (app's pending rows) and the stream
	requireLocations(t, pool, e.slot, "server IS NOT NULL")
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	r = e.startNoWait(func(c *Config) { c.Schema = "app" }) // back to the primary: a move
	waitFor(t, 2*time.Minute, "the old slot gone from the standby and the new one streaming", func() bool {
		oldThere, _ := slotState(standbyPool, e.slot)
		_, newActive := slotState(pool, e.slot)
		return !oldThere && newActive
	})
	after := e.produce(relaytest.Workload{Events: 100, Aggregates: 20, MaxTxSize: 3, Schema: "app", Type: "refund"})
	all.Committed = append(all.Committed, after.Committed...)
	requireOK(t, e.waitDelivered(all, 2*time.Minute))
	requireLocations(t, pool, e.slot, "server IS NULL AND move_fence IS NULL")
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, d := range recv.Deliveries() {
		for _, c := range decoys.Committed {
			if d.ID == c.ID {
				t.Fatalf("event %s of public.outbox_events was delivered: the relay read the search_path's table", d.ID)
			}
		}
	}
}

// requireLocations fails unless app.outbox_slot_location has slot's row, matching where, and
// public's tables of the same names have nothing of the slot.
func requireLocations(t *testing.T, pool *pgxpool.Pool, slot, where string) {
	t.Helper()
	var app, public, publicBackfill, appBackfill int
	err := pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM app.outbox_slot_location WHERE slot = $1 AND `+where+`),
		(SELECT count(*) FROM public.outbox_slot_location WHERE slot = $1),
		(SELECT count(*) FROM public.outbox_backfill WHERE slot = $1) + (SELECT count(*) FROM public.outbox_slots WHERE slot = $1),
		(SELECT count(*) FROM app.outbox_backfill WHERE slot = $1)`, slot).Scan(&app, &public, &publicBackfill, &appBackfill)
	if err != nil {
		t.Fatal(err)
	}
	if app != 1 || public != 0 || publicBackfill != 0 || appBackfill != 0 {
		t.Fatalf("app.outbox_slot_location rows with %s: %d (want 1); public.outbox_slot_location rows: %d, public backfill "+
			"and slot rows: %d (want 0); app backfill rows left: %d (want 0)", where, app, public, publicBackfill, appBackfill)
	}
}
