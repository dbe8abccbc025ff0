package demo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/inbox"
)

// reservationsTable is the demo consumer's own table. The inbox, not the primary key, is what
// makes a redelivery a quiet 200 instead of a 500 on every retry.
const reservationsTable = `CREATE TABLE IF NOT EXISTS stock_reservations (
	event_id    uuid PRIMARY KEY,
	order_id    text NOT NULL,
	reserved_at timestamptz NOT NULL DEFAULT now()
)`

// errFailing is what the warehouse answers while it fails on purpose.
var errFailing = errors.New("warehouse: failing on purpose (the demo's outage)")

// warehouse is the demo's consumer, built on the public inbox package as a user's would be: it
// reserves stock once per order.created event, however often the relay delivers it, and can be
// made to fail for a while so the relay retries. (examples/consumer is the same idea as a
// program to copy; the shipped binary does not link examples.)
type warehouse struct {
	inbox   *inbox.Handler
	mux     *http.ServeMux
	failing atomic.Bool
}

// newWarehouse creates stock_reservations if needed and mounts the inbox at /webhook. The
// database must be migrated (inbox_events).
func newWarehouse(ctx context.Context, pool *pgxpool.Pool, secrets []string) (*warehouse, error) {
	if _, err := pool.Exec(ctx, reservationsTable); err != nil {
		return nil, fmt.Errorf("create stock_reservations: %w", err)
	}
	w := &warehouse{mux: http.NewServeMux()}
	in, err := inbox.New(pool, secrets, w.reserve, inbox.Config{})
	if err != nil {
		return nil, err
	}
	w.inbox = in
	w.mux.Handle("/webhook", in)
	return w, nil
}

// reserve is the inbox.ProcessFunc: it runs in the inbox's transaction.
func (w *warehouse) reserve(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
	if w.Failing() {
		return errFailing
	}
	if ev.Type != "order.created" {
		return nil
	}
	return reserveStock(ctx, tx, ev.ID.String(), ev.AggregateID)
}

// reserveStock is the warehouse's effect of one order.created event, in the inbox's transaction.
func reserveStock(ctx context.Context, tx pgx.Tx, eventID, orderID string) error {
	_, err := tx.Exec(ctx, `INSERT INTO stock_reservations (event_id, order_id) VALUES ($1, $2)`, eventID, orderID)
	if err != nil {
		return fmt.Errorf("reserve stock for order %s: %w", orderID, err)
	}
	return nil
}

func (w *warehouse) ServeHTTP(rw http.ResponseWriter, r *http.Request) { w.mux.ServeHTTP(rw, r) }

// SetFailing makes every delivery fail (500, so the relay retries) until called with false.
func (w *warehouse) SetFailing(on bool) { w.failing.Store(on) }

// Failing reports whether the warehouse fails on purpose.
func (w *warehouse) Failing() bool { return w.failing.Load() }

// Stats returns the inbox's counts, among them the duplicates it absorbed.
func (w *warehouse) Stats() inbox.Stats { return w.inbox.Stats() }

// reservations counts the stock reservations made so far.
func reservations(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM stock_reservations`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count stock_reservations: %w", err)
	}
	return n, nil
}
