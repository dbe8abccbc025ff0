package inbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/signature"
)

// Mount the inbox at /webhook. The ProcessFunc's writes commit in the inbox's transaction, so
// the relay's retry of an event already applied changes nothing.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDSN()) // your DSN, on a database `outbox-relay migrate` ran on
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	_, _ = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS reservations (event_id uuid PRIMARY KEY, order_id text)`)

	secrets := signature.SplitSecrets("topsecret") // in your code: from WEBHOOK_SECRET
	h, err := inbox.New(pool, secrets, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO reservations VALUES ($1, $2)`, ev.ID, ev.AggregateID)
		return err
	}, inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /webhook", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// The relay delivers an event, then delivers it again (its first answer was lost).
	for range 2 {
		resp, err := http.DefaultClient.Do(relayRequest(srv.URL+"/webhook", "topsecret"))
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status, "duplicate:", resp.Header.Get(inbox.HeaderDuplicate) == "true")
	}
	var n int
	_ = pool.QueryRow(ctx, `SELECT count(*) FROM reservations`).Scan(&n)
	fmt.Println("reservations:", n, "duplicates absorbed:", h.Stats().Duplicates)
	// Output:
	// 200 OK duplicate: false
	// 200 OK duplicate: true
	// reservations: 1 duplicates absorbed: 1
}

// Check a delivery without a database, in any HTTP framework.
func ExampleVerify() {
	h := http.Header{}
	h.Set("X-Timestamp", "1700000000")
	h.Set("X-Signature", "sha256=625a14baf9101a938343dbbd360883050e7583216597fcbd0a04296f22e56cb8")
	body := []byte(`{"order_id":42}`)
	now := time.Unix(1700000100, 0)

	fmt.Println(inbox.Verify(h, body, []string{"topsecret"}, 0, now))
	err := inbox.Verify(h, body, []string{"wrong"}, 0, now)
	fmt.Println(err, inbox.StatusCode(err))
	err = inbox.Verify(h, body, []string{"topsecret"}, 0, now.Add(time.Hour))
	fmt.Println(inbox.StatusCode(err))
	// Output:
	// <nil>
	// signature does not match any configured secret (X-Signature) 401
	// 401
}

// relayRequest builds a signed order.created delivery as the relay sends it.
func relayRequest(url, secret string) *http.Request {
	body := []byte(`{"order_id":"42"}`)
	ts := time.Now().Unix()
	keys, _ := signature.Keys(signature.XSignature, []string{secret})
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Event-Id", "0190e3c4-8d4b-7c3a-9f1e-2b5d6a7c8e9f")
	req.Header.Set("X-Event-Type", "order.created")
	req.Header.Set("X-Aggregate-Type", "order")
	req.Header.Set("X-Aggregate-Id", "42")
	req.Header.Set("X-Attempt", "1")
	req.Header.Set("X-Timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("X-Signature", string(signature.AppendX(nil, keys, ts, body)))
	return req
}

// Consume the relay's events from a broker (NATS JetStream, Kafka) with the inbox's guarantee:
// Process takes a message's headers and body, and applies the event once however often the
// broker redelivers it. Acknowledge the message after Process returns nil.
func ExampleProcessor_Process() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDSN()) // your DSN
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	_, _ = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS shipments (event_id uuid PRIMARY KEY, order_id text)`)

	p, err := inbox.NewProcessor(pool, func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO shipments VALUES ($1, $2)`, ev.ID, ev.AggregateID)
		return err
	}, inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	// A message as the relay publishes it: with NATS, m.Headers() and m.Data().
	header := map[string][]string{
		"X-Event-Id":       {"0190e3c4-8d4b-7c3a-9f1e-2b5d6a7c8e9f"},
		"X-Event-Type":     {"order.created"},
		"X-Aggregate-Type": {"order"},
		"X-Aggregate-Id":   {"42"},
	}
	body := []byte(`{"order_id":"42"}`)
	for range 2 { // delivered, then redelivered
		res, err := p.Process(ctx, header, body)
		if err != nil {
			log.Fatal(err) // in a consumer: do not acknowledge; errors.Is(err, inbox.ErrMalformed): terminate
		}
		fmt.Printf("processed %d, duplicates %d\n", res.Processed, res.Duplicates)
	}
	// Output:
	// processed 1, duplicates 0
	// processed 0, duplicates 1
}

// Mount the inbox in a service written on database/sql (here with pgx's stdlib driver; lib/pq
// works the same): the ProcessFunc gets the inbox's transaction as a *sql.Tx.
func ExampleNewSQL() {
	db, err := sql.Open("pgx", exampleDSN()) // your driver and DSN
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	_, _ = db.Exec(`CREATE TABLE IF NOT EXISTS invoices (event_id uuid PRIMARY KEY, order_id text)`)

	h, err := inbox.NewSQL(db, []string{"topsecret"}, func(ctx context.Context, tx *sql.Tx, ev inbox.Event) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices VALUES ($1, $2)`, ev.ID, ev.AggregateID)
		return err
	}, inbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for range 2 {
		resp, err := http.DefaultClient.Do(relayRequest(srv.URL, "topsecret"))
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status, "duplicate:", resp.Header.Get(inbox.HeaderDuplicate) == "true")
	}
	// Output:
	// 200 OK duplicate: false
	// 200 OK duplicate: true
}

// Delete what the inbox no longer needs to remember: done rows received more than 30 days
// ago. An event delivered again after its row is gone is applied again, so keep rows longer
// than the sender may resend (PruneOptions.RetryHorizon, and the relay's own retention for
// `outbox-relay replay`). Config.Retention does the same in the background.
func ExamplePrune() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleDSN()) // your DSN
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	_, _ = pool.Exec(ctx, `INSERT INTO inbox_events (id, received_at, handler_status, payload)
		VALUES (gen_random_uuid(), now() - interval '40 days', 'done', '{}'),
		       (gen_random_uuid(), now() - interval '1 day', 'done', '{}')`)

	res, err := inbox.Prune(ctx, pool, inbox.PruneOptions{OlderThan: 30 * 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted", res.Deleted)
	// Output:
	// deleted 1
}
