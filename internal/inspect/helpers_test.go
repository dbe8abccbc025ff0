package inspect_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

const (
	slot = "test_slot"
	pub  = "test_pub"
)

// migrated returns a fresh migrated database's DSN and a pool on it.
func migrated(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	return relaytest.MigratedDB(t)
}

func exec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// createSlot creates the publication and an inactive pgoutput slot, as `run` would.
func createSlot(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	exec(t, pool, "CREATE PUBLICATION "+pub+" FOR TABLE outbox_events WITH (publish = 'insert')")
	exec(t, pool, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot)
}

// holdSlot streams from the slot until the test ends, so the slot is active, and returns the
// walsender's pid.
func holdSlot(t *testing.T, dsn string) int32 {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	err = pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + pub + "'"}})
	if err != nil {
		t.Fatal(err)
	}
	return int32(conn.PID())
}

// insert writes one outbox row with the given status, created (and made available) age ago.
func insert(t *testing.T, pool *pgxpool.Pool, aggType, aggID, status string, age time.Duration) string {
	t.Helper()
	var id string
	err := pool.QueryRow(context.Background(), `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at, available_at)
		VALUES ($1, $2, 'x.changed', '{}', $3, now() - make_interval(secs => $4), now() - make_interval(secs => $4))
		RETURNING id::text`, aggType, aggID, status, age.Seconds()).Scan(&id)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// park records aggType/aggID as parked behind firstID, age ago.
func park(t *testing.T, pool *pgxpool.Pool, aggType, aggID, firstID, reason string, age time.Duration) {
	t.Helper()
	exec(t, pool, `INSERT INTO outbox_parked_aggregates (aggregate_type, aggregate_id, first_event_id, reason, parked_at)
		VALUES ($1, $2, $3, $4, now() - make_interval(secs => $5))`, aggType, aggID, firstID, reason, age.Seconds())
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return -1
	}
	return m.GetGauge().GetValue()
}
