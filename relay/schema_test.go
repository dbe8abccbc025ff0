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
