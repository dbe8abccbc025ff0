package pgtest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// shortChildEnv marks the run of this test binary that TestShortSkipsWhatNeedsADatabase starts.
const shortChildEnv = "PGTEST_SHORT_CHILD"

// Under -short a test that asks for a database skips, saying why, and the test binary starts no
// cluster; without -short the same test gets its database (the positive control).
func TestShortSkipsWhatNeedsADatabase(t *testing.T) {
	if os.Getenv(shortChildEnv) != "" {
		t.Skip("the child run")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		cmd := exec.Command(exe, append([]string{"-test.run", "^TestShortChild$", "-test.v"}, args...)...)
		cmd.Env = append(os.Environ(), shortChildEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", exe, args, err, out)
		}
		return string(out)
	}
	out := run("-test.short")
	if !strings.Contains(out, "--- SKIP: TestShortChild") || !strings.Contains(out, "runs without -short") {
		t.Fatalf("under -short, a test asking for a database did not skip with the reason:\n%s", out)
	}
	if strings.Contains(out, "got a database") {
		t.Fatalf("under -short, a test got a database:\n%s", out)
	}
	if testing.Short() {
		return // the positive control starts a cluster
	}
	if out := run(); !strings.Contains(out, "--- PASS: TestShortChild") || !strings.Contains(out, "got a database") {
		t.Fatalf("without -short, the test did not get its database:\n%s", out)
	}
}

// TestShortChild asks for a database; it runs only as TestShortSkipsWhatNeedsADatabase's child.
func TestShortChild(t *testing.T) {
	if os.Getenv(shortChildEnv) == "" {
		t.Skip("run by TestShortSkipsWhatNeedsADatabase")
	}
	dsn := NewDB(t)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Log("got a database")
}
