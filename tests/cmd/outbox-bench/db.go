package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// Names used in every row's database. Each row gets a database of its own, dropped (with its
// slots) when the row is done, so no slot holds WAL for the next.
const (
	benchPublication = "bench_pub"
	relaySlot        = "bench_relay"
	rawSlot          = "bench_raw" // pg_recvlogical's
	// secondSlot and secondPublication are the second pipeline of the two-pipelines row: its
	// row filter matches no backlog row, so its walsender decodes all WAL and sends nothing,
	// which is the extra server CPU a second pipeline costs.
	secondSlot        = "bench_relay_b"
	secondPublication = "bench_pub_b"
	secondFilter      = "event_type = 'bench.none'"
	backlogChunk      = 5000 // rows per transaction when writing a backlog
	payloadPad        = 100  // bytes of padding in every payload
)

// benchDB is one row's database, migrated, with the publication and the given slots.
type benchDB struct {
	cluster *pgtest.Cluster
	name    string
	dsn     string
	conn    *pgx.Conn
}

// newBenchDB creates a database, migrates it and creates the publication and slots, so that
// everything written afterwards is in every slot.
func newBenchDB(ctx context.Context, c *pgtest.Cluster, prefix string, slots ...string) (*benchDB, error) {
	name, err := c.CreateDatabase(ctx, prefix)
	if err != nil {
		return nil, err
	}
	db := &benchDB{cluster: c, name: name, dsn: c.DSN(name)}
	if _, err := migrations.Up(ctx, db.dsn); err != nil {
		db.drop()
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	if db.conn, err = pgx.Connect(ctx, db.dsn); err != nil {
		db.drop()
		return nil, fmt.Errorf("connect %s: %w", name, err)
	}
	stmts := []string{"CREATE PUBLICATION " + benchPublication + " FOR TABLE outbox_events WITH (publish = 'insert')"}
	if slices.Contains(slots, secondSlot) {
		// Before the slots: a slot cannot decode WAL written before its publication existed.
		stmts = append(stmts, "CREATE PUBLICATION "+secondPublication+" FOR TABLE outbox_events WHERE ("+secondFilter+
			") WITH (publish = 'insert')")
	}
	for _, s := range slots {
		stmts = append(stmts, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", s))
	}
	for _, s := range stmts {
		if _, err := db.conn.Exec(ctx, s); err != nil {
			db.drop()
			return nil, fmt.Errorf("%s: %w", s, err)
		}
	}
	return db, nil
}

// createSlot creates a logical replication slot (pgoutput) in the database.
func (db *benchDB) createSlot(ctx context.Context, slot string) error {
	if _, err := db.conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
		return fmt.Errorf("create slot %s: %w", slot, err)
	}
	return nil
}

// drop closes the connection and drops the database and its slots. Errors are ignored: the
// cluster is thrown away at the end anyway.
func (db *benchDB) drop() {
	ctx := context.Background()
	if db.conn != nil {
		_ = db.conn.Close(ctx)
	}
	_ = db.cluster.DropDatabase(ctx, db.name)
}

// backlogSQL writes rows lo..hi (inclusive) of a backlog: aggregate g % aggregates, payload
// {"pad": <payloadPad × "x">, "seq": g}, so seq rises per aggregate in commit order.
const backlogSQL = `
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
SELECT 'order', (g % $3)::text, 'order.created', jsonb_build_object('seq', g, 'pad', repeat('x', $4))
FROM generate_series($1::int, $2::int) g`

// tenantBacklogSQL is backlogSQL with the event's tenant: 't' || g % $5.
const tenantBacklogSQL = `
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, tenant_id)
SELECT 'order', (g % $3)::text, 'order.created', jsonb_build_object('seq', g, 'pad', repeat('x', $4)), 't' || (g % $5)
FROM generate_series($1::int, $2::int) g`

// writeBacklog writes events rows over aggregates, backlogChunk rows per transaction, and
// returns the WAL position after them.
func (db *benchDB) writeBacklog(ctx context.Context, events, aggregates int) (string, error) {
	return db.writeChunks(ctx, events, backlogSQL, aggregates, payloadPad)
}

// writeTenantBacklog is writeBacklog with the events spread over tenants: row g belongs to
// tenant 't' || g % tenants.
func (db *benchDB) writeTenantBacklog(ctx context.Context, events, aggregates, tenants int) (string, error) {
	return db.writeChunks(ctx, events, tenantBacklogSQL, aggregates, payloadPad, tenants)
}

// writeChunks runs sql for rows 1..events, backlogChunk rows per transaction ($1 and $2 the
// first and last row, then args), and returns the WAL position after them.
func (db *benchDB) writeChunks(ctx context.Context, events int, sql string, args ...any) (string, error) {
	for lo := 1; lo <= events; lo += backlogChunk {
		hi := min(lo+backlogChunk-1, events)
		if _, err := db.conn.Exec(ctx, sql, append([]any{lo, hi}, args...)...); err != nil {
			return "", fmt.Errorf("write backlog rows %d..%d: %w", lo, hi, err)
		}
	}
	var lsn string
	err := db.conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	return lsn, err
}

// request is one webhook as the relay would send it: the row's id, key and body, where the body
// is jsonb's text output, which is what pgoutput sends.
type request struct {
	ID, AggregateType, AggregateID, EventType string
	Body                                      []byte
	// Path is where the lean client posts it; "" is /hook.
	Path string
}

// loadRequests reads every row of outbox_events as the relay would post it.
func (db *benchDB) loadRequests(ctx context.Context) ([]request, error) {
	rows, err := db.conn.Query(ctx, `SELECT id::text, aggregate_type, aggregate_id, event_type, payload::text FROM outbox_events`)
	if err != nil {
		return nil, err
	}
	var out []request
	for rows.Next() {
		var r request
		var body string
		if err := rows.Scan(&r.ID, &r.AggregateType, &r.AggregateID, &r.EventType, &body); err != nil {
			return nil, err
		}
		r.Body = []byte(body)
		out = append(out, r)
	}
	return out, rows.Err()
}

// serverVersion returns PostgreSQL's version string, e.g. "15.18 (Debian 15.18-0+deb12u1)".
func serverVersion(ctx context.Context, dsn string) (string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var v string
	err = conn.QueryRow(ctx, "SHOW server_version").Scan(&v)
	return v, err
}
