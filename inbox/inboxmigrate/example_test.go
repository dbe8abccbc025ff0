package inboxmigrate_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/inbox/inboxmigrate"
)

// Install the inbox in a consumer's own database at start-up, without the relay's CLI: only
// inbox_events, with its own version history. Running it again (another replica, the next
// deploy) applies nothing.
func ExampleMigrate() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exampleEmptyDSN()) // your DSN
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	cfg := inbox.Config{} // Schema: "app" to install it there; empty: current_schema()
	applied, err := inboxmigrate.Migrate(ctx, pool, cfg)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range applied {
		fmt.Println("applied", r.Source)
	}
	applied, _ = inboxmigrate.Migrate(ctx, pool, cfg)
	fmt.Println("applied on the second run:", len(applied))
	// Output:
	// applied inbox/00001_inbox_events
	// applied inbox/00002_inbox_prune_index
	// applied on the second run: 0
}
