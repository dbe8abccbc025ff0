package pgtest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(Main(m, Options{})) }

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestClusterIsLogicalAndRunsAsNonRoot(t *testing.T) {
	conn := connect(t, NewDB(t))
	var walLevel, user string
	if err := conn.QueryRow(context.Background(), "SHOW wal_level").Scan(&walLevel); err != nil {
		t.Fatal(err)
	}
	if walLevel != "logical" {
		t.Fatalf("wal_level = %q, want logical", walLevel)
	}
	var slots int
	if err := conn.QueryRow(context.Background(), "SELECT current_setting('max_replication_slots')::int").Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if slots < 20 {
		t.Fatalf("max_replication_slots = %d, want >= 20", slots)
	}
	if err := conn.QueryRow(context.Background(), "SELECT current_user").Scan(&user); err != nil {
		t.Fatal(err)
	}
	if user != "postgres" {
		t.Fatalf("current_user = %q", user)
	}
	// The server process runs as the postgres system user when this process is root, else as us.
	c := Shared(t)
	status, err := os.ReadFile("/proc/" + itoa(c.cmd.Process.Pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	want := os.Geteuid()
	if want == 0 {
		want = int(c.cred.Uid)
	}
	if !strings.Contains(string(status), "\nUid:\t"+itoa(want)+"\t") {
		t.Fatalf("postmaster does not run as uid %d:\n%s", want, status)
	}
}

func TestDatabasesAreIsolated(t *testing.T) {
	a, b := connect(t, NewDB(t)), connect(t, NewDB(t))
	ctx := context.Background()
	if _, err := a.Exec(ctx, "CREATE TABLE only_in_a (x int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("a table created in one test database is visible in another")
	}
}

func TestKilledServerRestartsWithCommittedData(t *testing.T) {
	dsn := NewDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (x int); INSERT INTO t SELECT generate_series(1, 1000)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	c := Shared(t)
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	conn = connect(t, dsn)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1000 {
		t.Fatalf("after an immediate restart: %d rows, want 1000", n)
	}
}

func TestFindBinDirHonoursPGBIN(t *testing.T) {
	t.Setenv("PG_BIN", t.TempDir()) // empty dir: not a server, so the search goes on
	dir, err := FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if !hasServer(dir) {
		t.Fatalf("FindBinDir returned %s without initdb/postgres", dir)
	}
	good := Shared(t).BinDir
	t.Setenv("PG_BIN", good)
	if dir, _ := FindBinDir(); dir != good {
		t.Fatalf("PG_BIN=%s ignored; got %s", good, dir)
	}
}

func TestCloseRemovesEverything(t *testing.T) {
	c, err := Start(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	pid := c.cmd.Process.Pid
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Fatalf("cluster dir %s still exists", c.Dir)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat("/proc/" + itoa(pid)); err == nil {
		t.Fatalf("postmaster %d still running", pid)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
