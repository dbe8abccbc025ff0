package pgtest

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestServerIsPGVersion makes a run with PG_VERSION=N prove it ran on N, so a CI step for 17
// can never pass on 15 by accident.
func TestServerIsPGVersion(t *testing.T) {
	want := os.Getenv("PG_VERSION")
	if want == "" || os.Getenv("PG_BIN") != "" {
		t.Skip("PG_VERSION not set (or PG_BIN overrides it): the shared cluster runs whatever FindBinDir found")
	}
	conn, err := pgx.Connect(context.Background(), NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var num int
	if err := conn.QueryRow(context.Background(),
		"SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		t.Fatal(err)
	}
	if strconv.Itoa(num/10000) != want {
		t.Fatalf("server_version_num = %d, want major version %s", num, want)
	}
}
