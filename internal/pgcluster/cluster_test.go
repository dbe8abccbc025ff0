package pgcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// shared is the cluster of this package's tests. (Package pgtest's Main is built on this
// package, so it cannot be used here.)
var shared *Cluster

func TestMain(m *testing.M) {
	c, err := Start(context.Background(), Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	shared = c
	code := m.Run()
	_ = c.Close()
	os.Exit(code)
}

// newDB creates a database on the shared cluster for this test and returns its DSN.
func newDB(t *testing.T) string {
	t.Helper()
	name, err := shared.CreateDatabase(context.Background(), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := shared.DropDatabase(context.Background(), name); err != nil {
			t.Errorf("drop database: %v", err)
		}
	})
	return shared.DSN(name)
}

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
	conn := connect(t, newDB(t))
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
	c := shared
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

func TestKilledServerRestartsWithCommittedData(t *testing.T) {
	dsn := newDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (x int); INSERT INTO t SELECT generate_series(1, 1000)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	c := shared
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
	good := shared.BinDir
	t.Setenv("PG_BIN", good)
	if dir, _ := FindBinDir(); dir != good {
		t.Fatalf("PG_BIN=%s ignored; got %s", good, dir)
	}
}

func TestCloseRemovesEverything(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
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

// Another cluster (or any program) taking the port while this one is stopped must not keep it
// from starting again at the same DSN: the cluster listens on its own socket, not on TCP.
func TestRestartWhileSomeoneHoldsThePort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	ctx := context.Background()
	c, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	dsn := c.DSN("postgres")
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	// Take the port on loopback; if something already holds it, it is taken all the same.
	if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port))); err == nil {
		t.Cleanup(func() { ln.Close() })
	}
	other, err := Start(ctx, Options{}) // a second cluster, as another test package would start
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	// Bounded: a client that dials a port someone else holds may wait for an answer forever.
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Start(startCtx); err != nil {
		t.Fatalf("restart with the port taken: %v", err)
	}
	if dsn != c.DSN("postgres") {
		t.Fatalf("DSN changed across a restart: %s, then %s", dsn, c.DSN("postgres"))
	}
	for _, cl := range []*Cluster{c, other} {
		var dir string
		if err := connect(t, cl.DSN("postgres")).QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(dir, cl.Dir) {
			t.Fatalf("DSN of the cluster in %s reached the server of %s", cl.Dir, dir)
		}
	}
}

// Every kind of client the repository points at a cluster takes its socket DSN: pgx (above),
// a replication connection as cdc opens it, and the libpq tools the bench runs.
func TestSocketDSNServesReplicationAndLibpq(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	ctx := context.Background()
	dsn := newDB(t)
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll(); err != nil {
		t.Fatalf("IDENTIFY_SYSTEM: %v", err)
	}
	out, err := exec.Command(ClientTool(shared.BinDir, "psql"), "-X", "-A", "-t", "-d", dsn, "-c", "SELECT 40 + 2").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "42" {
		t.Fatalf("psql -d %s: %v\n%s", dsn, err, out)
	}
	slot := exec.Command(ClientTool(shared.BinDir, "pg_recvlogical"), "-d", dsn, "--slot", "libpq_probe", "--create-slot")
	if out, err := slot.CombinedOutput(); err != nil {
		t.Fatalf("pg_recvlogical -d %s: %v\n%s", dsn, err, out)
	}
}

func TestTooLongSocketPathIsRefusedWithTheFix(t *testing.T) {
	c := &Cluster{Dir: "/tmp/" + strings.Repeat("x", 100), Port: DefaultPort}
	err := c.checkSocketPath()
	if err == nil || !strings.Contains(err.Error(), "TMPDIR") {
		t.Fatalf("err = %v, want one that says to shorten TMPDIR", err)
	}
	if err := shared.checkSocketPath(); err != nil {
		t.Fatalf("the shared cluster's own path: %v", err)
	}
}
