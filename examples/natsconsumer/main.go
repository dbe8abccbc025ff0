// Command natsconsumer is an example JetStream consumer of the relay's NATS destination with
// the inbox's guarantee: an inbox.Processor applies each message in one PostgreSQL transaction
// that also records its event id in inbox_events, so a message JetStream redelivers, or that
// the relay published twice (after a crash, outside the stream's duplicate window), has its
// effect once. It acknowledges a message only after that transaction committed, and installs
// inbox_events itself at start (inboxmigrate.Migrate).
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

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/inbox/inboxmigrate"
)

// Consume reads stream through the durable consumer name until ctx ends, handing each message
// to p, which applies each new event once.
func Consume(ctx context.Context, js jetstream.JetStream, p *inbox.Processor, stream, name string) error {
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
			handle(ctx, p, m)
		}
	}
	return nil
}

// handle applies one message and answers JetStream: an acknowledgement once the effect has
// committed (or had before: a duplicate), a termination for what is not a relay event, and a
// redelivery for anything else, which was rolled back.
func handle(ctx context.Context, p *inbox.Processor, m jetstream.Msg) {
	_, err := p.Process(ctx, m.Headers(), m.Data())
	switch {
	case err == nil:
		if err := m.DoubleAck(ctx); err != nil {
			log.Printf("ack %s: %v (a redelivery is de-duplicated)", m.Headers().Get("X-Event-Id"), err)
		}
	case errors.Is(err, inbox.ErrMalformed), errors.Is(err, inbox.ErrUnsupported):
		log.Printf("%v: not a relay event, terminated", err)
		_ = m.Term()
	default:
		log.Printf("%v (redelivered later)", err)
		_ = m.NakWithDelay(time.Second)
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv("DB_DSN"), os.Getenv("NATS_URL")); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, dsn, url string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	cfg := inbox.Config{} // Schema, Retention: see the inbox package
	if _, err := inboxmigrate.Migrate(ctx, pool, cfg); err != nil {
		return err
	}
	p, err := inbox.NewProcessor(pool, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		log.Printf("%s %s/%s %s: %s", ev.Type, ev.AggregateType, ev.AggregateID, ev.Sequence, ev.Payload)
		return nil // apply the event with tx here
	}, cfg)
	if err != nil {
		return err
	}
	defer p.Close()
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return Consume(ctx, js, p, "OUTBOX", "warehouse")
}
