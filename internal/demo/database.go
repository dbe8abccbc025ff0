package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgcluster"
)

// Names of what the demo creates in a database it is given, and drops again at the end.
const (
	Slot        = "outbox_relay_demo"
	Publication = "outbox_relay_demo"
	// AuditSlot and AuditPublication are the second pipeline's: big orders only, filtered in
	// PostgreSQL by its publication's row filter.
	AuditSlot        = "outbox_relay_demo_big"
	AuditPublication = "outbox_relay_demo_big"
)

// startCluster starts the throwaway cluster; tests replace it.
var startCluster = pgcluster.Start

// noServerError says how to get a server when DSN is empty and none is installed or could be
// fetched: pgcluster's error (the install command, PG_BIN, why the fetch failed), plus DB_DSN.
// It unwraps to that error, so to pgcluster.ErrNoBinaries.
type noServerError struct{ err error }

func (e noServerError) Error() string {
	return "demo: no server to start a throwaway cluster: " + e.err.Error() +
		"; or set DB_DSN to a database with wal_level=logical"
}

func (e noServerError) Unwrap() error { return e.err }

// throwaway starts a local cluster and creates the demo's database in it. The cluster is
// started on a context that Ctrl-C does not cancel: a server half started when the context
// ends would outlive its removed directory, so the caller closes it instead.
func (d *demo) throwaway(ctx context.Context) (string, error) {
	startCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	d.println("demo: starting a throwaway PostgreSQL with wal_level=logical")
	c, err := startCluster(startCtx, pgcluster.Options{})
	if errors.Is(err, pgcluster.ErrNoBinaries) {
		return "", noServerError{err}
	}
	if err != nil {
		return "", err
	}
	d.cleanup("remove the throwaway cluster", func(context.Context) error { return c.Close() })
	d.clusterDir = c.Dir
	if d.cfg.ClusterStarted != nil {
		d.cfg.ClusterStarted(c.Dir)
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	name, err := c.CreateDatabase(ctx, "demo")
	if err != nil {
		return "", err
	}
	return c.DSN(name), nil
}

// ordersTable is the producer's own table, as in the plain-SQL example of docs/guides/producing.md.
const ordersTable = `CREATE TABLE IF NOT EXISTS orders (
	id         bigserial PRIMARY KEY,
	customer   text NOT NULL,
	total      numeric(10, 2) NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
)`

// dropSlots drops the slots and publications of the demo's pipelines.
func dropSlots(ctx context.Context, pool *pgxpool.Pool) error {
	return errors.Join(dropSlot(ctx, pool, Slot, Publication), dropSlot(ctx, pool, AuditSlot, AuditPublication),
		dropSlot(ctx, pool, PartnersSlot, PartnersPublication))
}

// dropSlot drops a demo slot and publication from a database the demo was given. The slot may
// still be active for a moment after the relay returns, until its walsender exits.
func dropSlot(ctx context.Context, pool *pgxpool.Pool, slot, publication string) error {
	var err error
	for i := 0; i < 50; i++ {
		_, err = pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE slot_name = $1 AND database = current_database()`, slot)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.ObjectInUse {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("drop slot %s: %w (drop it yourself: SELECT pg_drop_replication_slot('%s'))", slot, err, slot)
	}
	if _, err := pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{publication}.Sanitize()); err != nil {
		return fmt.Errorf("drop publication %s: %w", publication, err)
	}
	return nil
}
