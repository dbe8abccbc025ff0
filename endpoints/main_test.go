package endpoints_test

import (
	"context"
	"log"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// migratedDB is a new database of the shared test cluster, migrated, and a connection to it.
func migratedDB(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	return dsn, conn
}

// exampleDSN creates a migrated database on the test cluster for an example (which has no
// testing.T) and returns its DSN; in your code this is your database's DSN.
func exampleDSN() string {
	c := pgtest.SharedCluster()
	if c == nil {
		log.Fatal("no test cluster: pgtest.Main runs in TestMain")
	}
	name, err := c.CreateDatabase(context.Background(), "example")
	if err != nil {
		log.Fatal(err)
	}
	dsn := c.DSN(name)
	if _, err := migrations.Up(context.Background(), dsn); err != nil {
		log.Fatal(err)
	}
	return dsn
}

// plain is the zero Store: the search_path's tables, secrets in clear.
var plain endpoints.Store
