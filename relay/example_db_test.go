package relay_test

import (
	"context"
	"log"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// exampleDB is a fresh database on the test cluster: where the examples say "your database".
func exampleDB() string {
	c := pgtest.SharedCluster()
	if c == nil {
		log.Fatal("no test cluster: pgtest.Main runs in TestMain")
	}
	name, err := c.CreateDatabase(context.Background(), "example")
	if err != nil {
		log.Fatal(err)
	}
	return c.DSN(name)
}
