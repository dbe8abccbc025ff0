package endpoints_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/endpoints"
)

// Register a customer's webhook in the transaction that creates the customer: both commit, or
// neither does. The secret is generated (none was given) and sealed with the relay's key; it is
// returned this once, to hand to the customer.
func ExampleStore_Add() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, exampleDSN())
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS customers (id text PRIMARY KEY)`)

	// In your code: the relay's secrets key, e.g. os.Getenv("OUTBOX_RELAY_SECRETS_KEY").
	sealer, err := endpoints.NewSealer("mG8cZk3mYF1yq0oQb5QhM0m3hXhR9S3Zf2w0lRk6x2U=")
	if err != nil {
		log.Fatal(err)
	}
	eps := endpoints.Store{Sealer: sealer}
	var ep endpoints.Endpoint
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO customers VALUES ('acme')`); err != nil {
			return err
		}
		ep, err = eps.Add(ctx, tx, endpoints.Endpoint{
			ID:         "acme",
			URL:        "https://acme.example/webhooks",
			TenantID:   "acme",
			EventTypes: []string{"order.*", "invoice.paid"},
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("endpoint:", ep.ID, ep.State)
	fmt.Println("secret to hand over once:", len(ep.Secret) > 40)
	fmt.Println("sealed with key:", ep.Secrets[0].KeyID == sealer.KeyID())

	// Output:
	// endpoint: acme enabled
	// secret to hand over once: true
	// sealed with key: true
}
