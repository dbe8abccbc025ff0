package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// A slot Setup creates for a pipeline with endpoints starts with the endpoints of its exported
// snapshot: one committed after the slot's consistent point, while the bootstrap waits, is not
// in it, and the stream carries its creation after the bootstrap's LSN instead. Another start
// on the existing slot records nothing more.
func TestSetupBootstrapsTheEndpointsOfTheSlotsSnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, pool := relaytest.MigratedDB(t)
	for _, id := range []string{"ep_a", "ep_b"} {
		run(t, pool, `INSERT INTO outbox_endpoints (id, url, secrets) VALUES ('`+id+`', 'https://`+id+`.example/', `+secrets+`)`)
	}
	// The bootstrap's INSERT waits for this lock, after the slot exists and its snapshot is taken.
	// (SHARE, not ACCESS EXCLUSIVE: that one is WAL-logged, so it takes a transaction id, which
	// the slot's creation would wait for.)
	locker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Rollback(ctx)
	run(t, locker, `LOCK TABLE outbox_endpoint_versions IN SHARE MODE`)
	opts := cdc.SetupOptions{NoBackfill: true, Endpoints: true, Pipeline: "p"}
	done := make(chan error, 1)
	go func() { _, err := cdc.Setup(ctx, dsn, "s_boot", "p_boot", opts); done <- err }()
	waitFor(t, ctx, "the bootstrap waits for the lock", func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE c.relname = 'outbox_endpoint_versions' AND NOT l.granted)`).Scan(&waiting)
		return err == nil && waiting
	})
	run(t, pool, `INSERT INTO outbox_endpoints (id, url, secrets) VALUES ('ep_c', 'https://ep_c.example/', `+secrets+`)`)
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	boot, vs, err := state.EndpointVersions(ctx, pool, "public", "p")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range vs {
		ids = append(ids, v.ID)
	}
	if !boot || !slices.Equal(ids, []string{"ep_a", "ep_b"}) {
		t.Fatalf("bootstrap %v of %v, want ep_a and ep_b (ep_c committed after the slot's start)", boot, ids)
	}
	var start pglogrepl.LSN
	var startText string
	if err := pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 's_boot'`).
		Scan(&startText); err != nil {
		t.Fatal(err)
	}
	if start, err = pglogrepl.ParseLSN(startText); err != nil {
		t.Fatal(err)
	}
	if vs[0].LSN != start-1 {
		t.Fatalf("bootstrap at %s, want just before the slot's consistent point %s", vs[0].LSN, start)
	}
	tx := <-streamTxs(t, ctx, dsn, "s_boot", "p_boot")
	if len(tx.Controls) != 1 || tx.Controls[0].Endpoint.ID != "ep_c" || tx.CommitLSN <= vs[0].LSN {
		t.Fatalf("the stream's first transaction at %s: %s, want ep_c's upsert after %s", tx.CommitLSN, describe(t, tx), vs[0].LSN)
	}
	// A start on the slot that exists creates nothing, and records nothing more.
	res, err := cdc.Setup(ctx, dsn, "s_boot", "p_boot", opts)
	if err != nil || res.SlotCreated {
		t.Fatalf("second start: created %v, %v", res.SlotCreated, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_endpoint_versions`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("%d version rows after the second start (%v), want 3 (the marker, ep_a, ep_b)", n, err)
	}
}

// With Endpoints, Setup needs a pipeline name, and the privileges on the endpoint tables:
// their GRANT is named before anything is created; without Endpoints they are not asked for.
func TestSetupWithEndpointsChecksTheirPrivileges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, pool := relaytest.MigratedDB(t)
	if _, err := cdc.Setup(ctx, dsn, "s", "p", cdc.SetupOptions{Endpoints: true}); !errors.Is(err, cdc.ErrSetupOptions) {
		t.Fatalf("no pipeline name: %v, want ErrSetupOptions", err)
	}
	role := fmt.Sprintf("relay_%d", time.Now().UnixNano())
	run(t, pool, fmt.Sprintf(`CREATE ROLE %[1]s LOGIN REPLICATION PASSWORD 'pw';
		GRANT SELECT, UPDATE ON outbox_events TO %[1]s;
		GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_parked_aggregates TO %[1]s;
		GRANT SELECT, INSERT, DELETE ON outbox_backfill TO %[1]s; GRANT SELECT, INSERT, UPDATE ON outbox_slots TO %[1]s;
		GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_pipeline_events TO %[1]s;
		GRANT SELECT, INSERT, UPDATE ON outbox_pipeline_control TO %[1]s; GRANT SELECT, UPDATE ON outbox_replays TO %[1]s;
		GRANT SELECT, UPDATE ON outbox_reshard TO %[1]s; GRANT SELECT, INSERT, UPDATE ON outbox_slot_location TO %[1]s;
		GRANT SELECT ON outbox_endpoints, outbox_endpoint_status TO %[1]s;
		CREATE PUBLICATION p_role FOR TABLE outbox_events WITH (publish = 'insert')`, role))
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, "pw")
	roleDSN := u.String()
	_, err = cdc.Setup(ctx, roleDSN, "s_role", "p_role", cdc.SetupOptions{Endpoints: true, Pipeline: "p"})
	want := fmt.Sprintf(`GRANT UPDATE ON "public"."outbox_endpoints" TO "%[1]s"; GRANT SELECT, INSERT, DELETE ON `+
		`"public"."outbox_endpoint_versions" TO "%[1]s"; GRANT INSERT, UPDATE, DELETE ON "public"."outbox_endpoint_status" TO "%[1]s"; `+
		`GRANT SELECT, INSERT, DELETE ON "public"."outbox_endpoint_outages" TO "%[1]s";`, role)
	if !errors.Is(err, cdc.ErrNoPrivilege) || !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("with endpoints: %v\nwant ErrNoPrivilege ending in %s", err, want)
	}
	var slots int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 's_role'`).Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("a refused start left %d slots (%v)", slots, err)
	}
	if _, err := cdc.Setup(ctx, roleDSN, "s_role", "p_role", cdc.SetupOptions{}); err != nil {
		t.Fatalf("without endpoints: %v", err)
	}
}

func waitFor(t *testing.T, ctx context.Context, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
