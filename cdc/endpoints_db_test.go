package cdc_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// Every change of outbox_endpoints, by plain SQL of a role that is neither superuser nor
// replication, reaches the stream as a Control at its place among its transaction's events, in
// commit order across transactions; another schema's outbox_endpoints, which the same slot
// carries messages of, changes nothing.
func TestEndpointChangesArriveInTheStreamAtTheirPlace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, pool := relaytest.MigratedDB(t)
	if _, err := migrations.UpWith(ctx, dsn, migrations.Options{Schema: "other"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cdc.Setup(ctx, dsn, "s_ep", "p_ep", cdc.SetupOptions{NoBackfill: true}); err != nil {
		t.Fatal(err)
	}
	writer := producerPool(t, pool, dsn)
	txs := streamTxs(t, ctx, dsn, "s_ep", "p_ep")

	// Two transactions that overlap: the one that began first commits last, and comes last.
	late, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	run(t, late, `INSERT INTO outbox_endpoints (id, url, secrets) VALUES ('ep_late', 'https://late.example/', `+secrets+`)`)
	run(t, writer, `INSERT INTO outbox_endpoints (id, url, secrets) VALUES ('ep_early', 'https://early.example/', `+secrets+`)`)
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// One transaction with events and changes interleaved, and another schema's changes.
	run(t, writer, `BEGIN;
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'e1', '{}');
		INSERT INTO outbox_endpoints (id, url, secrets, tenant_id) VALUES ('ep_a', 'https://a.example/', `+secrets+`, 'acme');
		INSERT INTO other.outbox_endpoints (id, url, secrets) VALUES ('ep_other', 'https://other.example/', `+secrets+`);
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, tenant_id) VALUES ('order', '1', 'e2', '{}', 'acme');
		UPDATE outbox_endpoints SET state = 'paused', paused_at = now() WHERE id = 'ep_a';
		UPDATE outbox_endpoints SET id = 'ep_b' WHERE id = 'ep_a';
		UPDATE other.outbox_endpoints SET url = 'https://other.example/2' WHERE id = 'ep_other';
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'e3', '{}');
		DELETE FROM outbox_endpoints WHERE id = 'ep_b';
		DELETE FROM other.outbox_endpoints;
		COMMIT`)
	run(t, writer, `TRUNCATE other.outbox_endpoints`) // nothing of this schema: no transaction at all
	run(t, writer, `TRUNCATE outbox_endpoints`)
	run(t, writer, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'e4', '{}')`)

	var got []string
	for len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "tx [e4]") {
		select {
		case tx := <-txs:
			got = append(got, describe(t, tx))
		case <-ctx.Done():
			t.Fatalf("the stream stopped after %q", got)
		}
	}
	want := []string{
		"tx [] {0 upsert ep_early https://early.example/ enabled}",
		"tx [] {0 upsert ep_late https://late.example/ enabled}",
		"tx [e1 e2/acme e3] {1 upsert ep_a https://a.example/ enabled acme} {2 upsert ep_a https://a.example/ paused acme} " +
			"{2 delete ep_a} {2 upsert ep_b https://a.example/ paused acme} {3 delete ep_b}",
		"tx [] {0 truncate }",
		"tx [e4]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the stream carried\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// secrets is a secrets column value the table's CHECKs accept.
const secrets = `'[{"secret": "0123456789abcdef0123"}]'`

// producerPool returns a pool of a role that may write the outbox tables and nothing more: no
// superuser, no REPLICATION, as an application's role.
func producerPool(t *testing.T, admin *pgxpool.Pool, dsn string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	role := fmt.Sprintf("producer_%d", time.Now().UnixNano())
	run(t, admin, fmt.Sprintf(`CREATE ROLE %[1]s LOGIN PASSWORD 'pw';
		GRANT USAGE ON SCHEMA public, other TO %[1]s;
		GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON outbox_endpoints, other.outbox_endpoints TO %[1]s;
		GRANT INSERT ON outbox_events TO %[1]s; GRANT USAGE ON SEQUENCE outbox_events_insert_seq TO %[1]s`, role))
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User, cfg.ConnConfig.Password = role, "pw"
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// streamTxs runs a stream of slot until the test ends and returns the transactions it carries.
func streamTxs(t *testing.T, ctx context.Context, dsn, slot, pub string) <-chan *cdc.Tx {
	t.Helper()
	tracker := cdc.NewTracker(1000, 1<<20)
	stream := cdc.NewStream(cdc.Config{DSN: dsn, Slot: slot, Publication: pub}, tracker)
	runCtx, stop := context.WithCancel(ctx)
	txs := make(chan *cdc.Tx, 64)
	drained := make(chan struct{})
	close(drained) // nothing is delivered: nothing to wait for
	var g errgroup.Group
	g.Go(func() error { return stream.Run(runCtx, txs, drained) })
	t.Cleanup(func() {
		stop()
		if err := g.Wait(); err != nil {
			t.Errorf("stream: %v", err)
		}
	})
	return txs
}

// describe writes a transaction's events (by event type, and tenant) and controls, each endpoint change
// with its row decoded as the relay's endpoint row.
func describe(t *testing.T, tx *cdc.Tx) string {
	t.Helper()
	var evs []string
	for _, m := range tx.Events {
		ev := m.EventType
		if m.TenantID != "" {
			ev += "/" + m.TenantID
		}
		evs = append(evs, ev)
	}
	s := "tx [" + strings.Join(evs, " ") + "]"
	for _, c := range tx.Controls {
		e := c.Endpoint
		if e == nil {
			t.Fatalf("a control that is not an endpoint change: %+v", c)
		}
		s += fmt.Sprintf(" {%d %s %s", c.At, e.Op, e.ID)
		if e.Op == cdc.EndpointUpsert {
			var row endpoint.Row
			if err := json.Unmarshal(e.Row, &row); err != nil {
				t.Fatalf("row %s: %v", e.Row, err)
			}
			if row.ID != e.ID {
				t.Fatalf("upsert of %s carries the row of %s", e.ID, row.ID)
			}
			s += " " + row.URL + " " + row.State
			if row.TenantID != "" {
				s += " " + row.TenantID
			}
		}
		s += "}"
	}
	return s
}

// run runs sql on db (a pool or a transaction), failing the test on an error.
func run(t *testing.T, db cdc.Emitter, sql string) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
