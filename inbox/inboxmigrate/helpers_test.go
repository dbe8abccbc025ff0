package inboxmigrate_test

import (
	"context"
	"log"
	"os"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// exampleEmptyDSN makes an empty database on the test cluster, for the example; in a user's
// code this is their DSN.
func exampleEmptyDSN() string {
	c := pgtest.SharedCluster()
	if c == nil {
		log.Fatal("no test cluster")
	}
	name, err := c.CreateDatabase(context.Background(), "example")
	if err != nil {
		log.Fatal(err)
	}
	return c.DSN(name)
}
