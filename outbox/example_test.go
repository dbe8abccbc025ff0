package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// Write a business row and its event in one transaction: both commit, or neither does.
func ExampleEnqueue() {
	ctx := context.Background()
	dsn := exampleDB() // your database's DSN
	// Once per deployment: `outbox-relay migrate`, or from Go:
	if _, err := migrations.Up(ctx, dsn); err != nil {
		log.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id bigserial PRIMARY KEY, total numeric)`)

	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var orderID int64
		if err := tx.QueryRow(ctx, `INSERT INTO orders (total) VALUES (42.50) RETURNING id`).Scan(&orderID); err != nil {
			return err
		}
		_, err := outbox.Enqueue(ctx, tx, outbox.Event{
			AggregateType: "order",
			AggregateID:   fmt.Sprint(orderID),
			EventType:     "order.created",
			Payload:       map[string]any{"order_id": orderID, "total": "42.50"},
			DedupKey:      fmt.Sprintf("order.created:%d", orderID),
		})
		if errors.Is(err, outbox.ErrDuplicate) {
			return nil // already enqueued: nothing more to do
		}
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	var n int
	_ = conn.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE event_type = 'order.created'`).Scan(&n)
	fmt.Println("events waiting for the relay:", n)
	// Output: events waiting for the relay: 1
}

// The relay's tables in a schema of their own (`outbox-relay migrate --schema outbox`, and the
// relay runs with --schema outbox): name it, and the event goes there whatever the
// connection's search_path.
func ExampleSchema_Enqueue() {
	ctx := context.Background()
	dsn := exampleDB() // your database's DSN
	if _, err := migrations.UpWith(ctx, dsn, migrations.Options{Schema: "outbox"}); err != nil {
		log.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)

	events := outbox.Schema("outbox")
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := events.Enqueue(ctx, tx, outbox.Event{
			AggregateType: "order", AggregateID: "42", EventType: "order.created",
			Payload: map[string]any{"order_id": 42},
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	var n int
	_ = conn.QueryRow(ctx, `SELECT count(*) FROM outbox.outbox_events`).Scan(&n)
	fmt.Println("events in outbox.outbox_events:", n)
	// Output: events in outbox.outbox_events: 1
}
