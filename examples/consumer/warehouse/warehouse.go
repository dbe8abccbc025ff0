// Package warehouse is the example consumer made importable: it reserves stock for every
// order.created event, through the inbox, so that however often the relay delivers an event,
// its order is reserved once. The consumer command serves it; a demo can start it in-process
// with New and Serve on a free port, and make it fail for a while with SetFailing to show the
// relay's retries.
//
// # Tables
//
// Setup installs both of the consumer's tables in its own database, so the consumer ships
// without the relay's CLI: inbox_events through inboxmigrate.Migrate (the inbox alone, with its own
// version history; a no-op where `outbox-relay migrate` or an earlier start made it), and
// stock_reservations (event_id uuid primary key, order_id text, reserved_at timestamptz).
package warehouse

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/inbox/inboxmigrate"
)

// schema is the warehouse's own table. The primary key on event_id would also catch a double
// reservation, but as a 500 on every retry: the inbox is what makes a redelivery a quiet 200.
const schema = `CREATE TABLE IF NOT EXISTS stock_reservations (
	event_id    uuid PRIMARY KEY,
	order_id    text NOT NULL,
	reserved_at timestamptz NOT NULL DEFAULT now()
)`

// ErrFailing is what Reserve returns while the Warehouse is set to fail.
var ErrFailing = errors.New("warehouse: failing on purpose (SetFailing)")

// Setup installs inbox_events in cfg.Schema (inboxmigrate.Migrate; the connection's current_schema()
// when empty) and creates stock_reservations if it is missing.
func Setup(ctx context.Context, pool *pgxpool.Pool, cfg inbox.Config) error {
	if _, err := inboxmigrate.Migrate(ctx, pool, cfg); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create stock_reservations: %w", err)
	}
	return nil
}

// checkInbox fails, saying what to do, when inbox_events is missing.
func checkInbox(ctx context.Context, pool *pgxpool.Pool) error {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('inbox_events') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("check inbox_events: %w", err)
	}
	if !exists {
		return errors.New("table inbox_events is missing: restart the consumer (it installs it) or run `outbox-relay migrate --inbox-only`")
	}
	return nil
}

// Warehouse applies order events. The zero value is ready to use and not failing.
type Warehouse struct {
	failing atomic.Bool
}

// SetFailing makes Reserve fail with ErrFailing (so the inbox answers 500 and the relay
// retries) until it is called again with false.
func (w *Warehouse) SetFailing(on bool) { w.failing.Store(on) }

// Failing reports whether the Warehouse is set to fail.
func (w *Warehouse) Failing() bool { return w.failing.Load() }

// Reserve is the warehouse's inbox.ProcessFunc: for an order.created event it reserves stock
// for the order named by the event's aggregate id, in the inbox's transaction. Other event
// types are recorded by the inbox and otherwise ignored.
func (w *Warehouse) Reserve(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
	if w.Failing() {
		return ErrFailing
	}
	if ev.Type != "order.created" {
		return nil
	}
	if ev.AggregateID == "" {
		return fmt.Errorf("order.created event %s has no X-Aggregate-Id", ev.ID)
	}
	_, err := tx.Exec(ctx, `INSERT INTO stock_reservations (event_id, order_id) VALUES ($1, $2)`, ev.ID, ev.AggregateID)
	if err != nil {
		return fmt.Errorf("reserve stock for order %s: %w", ev.AggregateID, err)
	}
	return nil
}

// Reservations counts the stock reservations made so far.
func Reservations(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM stock_reservations`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count stock_reservations: %w", err)
	}
	return n, nil
}
