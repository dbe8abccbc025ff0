package pgtest

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m, Options{})) }

func TestNewDBGivesEachTestItsOwnDatabase(t *testing.T) {
	ctx := context.Background()
	var conns [2]*pgx.Conn
	for i := range conns {
		conn, err := pgx.Connect(ctx, NewDB(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(ctx) })
		conns[i] = conn
	}
	if _, err := conns[0].Exec(ctx, "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conns[1].QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("a table created in one test database is visible in another")
	}
	if SharedCluster() != Shared(t) {
		t.Fatal("SharedCluster and Shared disagree")
	}
}
