// Command natsconsumer is an example JetStream consumer of the relay's NATS destination with
// inbox-style de-duplication: each message is applied in one PostgreSQL transaction that also
// records its event id in inbox_events, so a message JetStream redelivers, or that the relay
// published twice (after a crash, outside the stream's duplicate window), has its effect once.
// It acknowledges a message only after that transaction committed.
//
//	DB_DSN=postgres://app@db/app NATS_URL=nats://127.0.0.1:4222 natsconsumer
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Event is what a message carries: the relay's headers and the payload.
type Event struct {
	ID, Type, AggregateType, AggregateID, Sequence string
	Payload                                        []byte
}

// Handler applies one event inside the inbox transaction; an error rolls it back and the
// message is redelivered.
type Handler func(ctx context.Context, tx pgx.Tx, ev Event) error

// Consume reads stream through the durable consumer name until ctx ends, applying each new
// event once.
func Consume(ctx context.Context, js jetstream.JetStream, pool *pgxpool.Pool, stream, name string, handle Handler) error {
	c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: name,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
		// One message at a time keeps each aggregate's events in stream order, which the relay
		// made commit order. For more throughput, run one consumer per subject partition.
		MaxAckPending: 1})
	if err != nil {
		return fmt.Errorf("consumer %s on %s: %w", name, stream, err)
	}
	for ctx.Err() == nil {
		batch, err := c.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for m := range batch.Messages() {
			if err := apply(ctx, pool, m, handle); err != nil {
				log.Printf("event %s: %v (redelivered later)", m.Headers().Get("X-Event-Id"), err)
				_ = m.NakWithDelay(time.Second)
				continue
			}
			if err := m.DoubleAck(ctx); err != nil {
				log.Printf("ack %s: %v (a redelivery is de-duplicated)", m.Headers().Get("X-Event-Id"), err)
			}
		}
	}
	return nil
}

// apply runs the inbox transaction of one message: claim the event id, run the handler, commit.
// An id already claimed is a duplicate: nothing runs.
func apply(ctx context.Context, pool *pgxpool.Pool, m jetstream.Msg, handle Handler) error {
	h := m.Headers()
	ev := Event{ID: h.Get("X-Event-Id"), Type: h.Get("X-Event-Type"), AggregateType: h.Get("X-Aggregate-Type"),
		AggregateID: h.Get("X-Aggregate-Id"), Sequence: h.Get("X-Event-Sequence"), Payload: m.Data()}
	if ev.ID == "" {
		return errors.New("no X-Event-Id header: not a relay message")
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, `INSERT INTO inbox_events (id, handler_status, payload, processed_at)
		VALUES ($1, 'done', $2, clock_timestamp()) ON CONFLICT (id) DO NOTHING`, ev.ID, ev.Payload)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return tx.Commit(ctx) // a duplicate: already applied
	}
	if err := handle(ctx, tx, ev); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DB_DSN"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	url := os.Getenv("NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	err = Consume(ctx, js, pool, "OUTBOX", "warehouse", func(ctx context.Context, tx pgx.Tx, ev Event) error {
		log.Printf("%s %s/%s %s: %s", ev.Type, ev.AggregateType, ev.AggregateID, ev.Sequence, ev.Payload)
		return nil // apply the event with tx here
	})
	if err != nil {
		log.Fatal(err)
	}
}
