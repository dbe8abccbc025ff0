package demo

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSStream is the stream the relay creates in NATS mode (create_stream) for its subjects.
const NATSStream = "OUTBOX"

// What the relay publishes to in NATS mode, and the warehouse reads from.
const (
	natsStream = NATSStream
	// natsSubjects is the stream's subject filter: the default template
	// outbox.{aggregate_type}.{event_type} with each placeholder as '*'.
	natsSubjects = "outbox.*.*"
	// natsDurable is the warehouse's durable consumer on the stream.
	natsDurable = "warehouse"
	// natsAckWait is how long JetStream waits for an ack before it redelivers: short, so that a
	// message whose ack died with the broker comes back soon after the restart.
	natsAckWait = 3 * time.Second
)

// natsWarehouse is the demo's warehouse in NATS mode: a durable JetStream consumer that applies
// each message in one transaction with inbox-style de-duplication (the message's event id goes
// into inbox_events, ON CONFLICT DO NOTHING, in the transaction that reserves the stock), and
// acks only after the commit. It is the pattern of examples/natsconsumer.
//
// One in lose of the messages it applied gets a nak instead of its ack, as when the ack is lost
// on the way after the commit: JetStream redelivers the message and the inbox absorbs it.
// (A lost ack would be redelivered after AckWait; the nak only skips the wait.)
type natsWarehouse struct {
	pool *pgxpool.Pool
	url  string
	lose int64 // 0: lose nothing

	applied    atomic.Int64
	duplicates atomic.Int64
	lost       atomic.Int64
	errs       *logTail // errors it retried after, for when the demo does not drain
}

// startNATSConsumer creates stock_reservations and runs the warehouse on the broker until
// teardown. The stream need not exist yet: the relay creates it, and the consumer retries.
func (d *demo) startNATSConsumer(ctx context.Context) error {
	if _, err := d.pool.Exec(ctx, reservationsTable); err != nil {
		return fmt.Errorf("create stock_reservations: %w", err)
	}
	d.natsWarehouse = &natsWarehouse{pool: d.pool, url: d.nats.URL(), lose: int64(d.cfg.LoseEvery), errs: newLogTail(10)}
	d.consumerRun = d.spawn(ctx, "stop the consumer", d.natsWarehouse.run)
	return nil
}

// run consumes until ctx is done. Errors (the broker down, the stream not created yet) are
// kept in errs and retried: a broker restart is part of the demo.
func (w *natsWarehouse) run(ctx context.Context) error {
	nc, err := nats.Connect(w.url, nats.Name("outbox-relay-demo-warehouse"), nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return fmt.Errorf("consumer: connect to %s: %w", w.url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	for ctx.Err() == nil {
		if err := w.consume(ctx, js); err != nil && ctx.Err() == nil {
			_, _ = fmt.Fprintf(w.errs, "%s %v", time.Now().Format(time.TimeOnly), err)
			sleep(ctx, 200*time.Millisecond)
		}
	}
	return nil
}

// consume fetches and applies messages until ctx is done or the broker fails.
func (w *natsWarehouse) consume(ctx context.Context, js jetstream.JetStream) error {
	c, err := js.CreateOrUpdateConsumer(ctx, natsStream, jetstream.ConsumerConfig{Durable: natsDurable,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: natsAckWait,
		// One message at a time keeps each aggregate's events in stream order, which the relay
		// made commit order.
		MaxAckPending: 1})
	if err != nil {
		return fmt.Errorf("consumer %s on stream %s: %w", natsDurable, natsStream, err)
	}
	for ctx.Err() == nil {
		batch, err := c.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		for m := range batch.Messages() {
			w.handle(ctx, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
			return fmt.Errorf("fetch: %w", err)
		}
	}
	return nil
}

// handle applies one message and acks it, or naks it: on a failed transaction, and for the
// lost acks.
func (w *natsWarehouse) handle(ctx context.Context, m jetstream.Msg) {
	fresh, err := w.apply(ctx, m)
	if err != nil {
		_, _ = fmt.Fprintf(w.errs, "%s event %s: %v (redelivered)", time.Now().Format(time.TimeOnly), m.Headers().Get("X-Event-Id"), err)
		_ = m.Nak()
		return
	}
	if fresh && w.lose > 0 && w.applied.Add(1)%w.lose == 0 {
		w.lost.Add(1)
		_ = m.Nak()
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	// An ack that fails (the broker just died) means a redelivery, which the inbox absorbs.
	_ = m.DoubleAck(actx)
}

// apply runs the inbox transaction of one message: claim the event id in inbox_events, reserve
// the stock, commit. An id already claimed is a duplicate: nothing else runs. It reports
// whether the event was new.
func (w *natsWarehouse) apply(ctx context.Context, m jetstream.Msg) (fresh bool, err error) {
	h := m.Headers()
	id, typ, aggregate := h.Get("X-Event-Id"), h.Get("X-Event-Type"), h.Get("X-Aggregate-Id")
	if id == "" {
		return false, errors.New("no X-Event-Id header: not a relay message")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	tag, err := tx.Exec(ctx, `INSERT INTO inbox_events (id, handler_status, payload, processed_at)
		VALUES ($1, 'done', $2, clock_timestamp()) ON CONFLICT (id) DO NOTHING`, id, m.Data())
	if err != nil {
		return false, fmt.Errorf("claim in inbox_events: %w", err)
	}
	if tag.RowsAffected() == 0 {
		w.duplicates.Add(1)
		return false, nil // already applied: the transaction only looked
	}
	if typ == "order.created" {
		if err := reserveStock(ctx, tx, id, aggregate); err != nil {
			return false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit: %w", err)
	}
	return true, nil
}
