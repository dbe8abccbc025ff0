package relay_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/signature"
)

// Run the relay inside your own program instead of the outbox-relay binary: the same
// Config that `outbox-relay run` fills from its flags. Here it delivers one event to a
// webhook that verifies the signature, then stops cleanly when its context is cancelled.
func ExampleRun() {
	ctx := context.Background()
	dsn := exampleDB() // your database: wal_level = logical, a role with REPLICATION
	if _, err := migrations.Up(ctx, dsn); err != nil {
		log.Fatal(err)
	}

	const secret = "a-long-random-secret"
	received := make(chan string, 1)
	consumer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		keys, _ := signature.Keys(signature.XSignature, []string{secret})
		if !signature.VerifyX(keys, r.Header.Get("X-Timestamp"), body, r.Header.Get("X-Signature")) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		select { // a redelivery (at least once) is answered 2xx again
		case received <- r.Header.Get("X-Event-Type") + " " + string(body):
		default:
		}
	}))
	defer consumer.Close()

	// An event written before the relay's first start is delivered too: creating the slot
	// backfills the rows already pending.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		_, err := outbox.Enqueue(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "42",
			EventType: "order.created", Payload: map[string]int{"order_id": 42}})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- relay.Run(runCtx, relay.Config{
			DSN:        dsn,
			WebhookURL: consumer.URL,
			Secrets:    []string{secret},
			Logger:     zerolog.New(os.Stderr).Level(zerolog.WarnLevel),
		})
	}()
	fmt.Println(<-received)
	stop() // SIGTERM in the binary: finish in-flight deliveries, confirm, end replication
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output: order.created {"order_id": 42}
}
