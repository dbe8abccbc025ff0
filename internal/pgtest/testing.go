package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// shared is the cluster of the current test binary, set by Main.
var shared *Cluster

// Main starts one cluster for a test package, runs its tests, then removes the cluster, and
// returns the exit code for TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }
//
// Cleanup runs before the exit code is returned, so nothing is left running or on disk. When no
// server binaries are found, it prints which package to install and fails (never skips).
func Main(m *testing.M, opts Options) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	c, err := Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		return 1
	}
	defer c.Close()
	shared = c
	return m.Run()
}

// Shared returns the cluster started by Main. It fails the test if Main did not run.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	if shared == nil {
		t.Fatal("pgtest: no cluster; call pgtest.Main from TestMain")
	}
	return shared
}

// NewDB creates a fresh database on the shared cluster for this test, drops it when the test
// ends, and returns its DSN.
func NewDB(t testing.TB) string {
	t.Helper()
	c := Shared(t)
	ctx := context.Background()
	name, err := c.CreateDatabase(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.DropDatabase(context.Background(), name); err != nil {
			t.Errorf("drop database: %v", err)
		}
	})
	return c.DSN(name)
}

// SharedCluster returns the cluster started by Main, or nil, for examples that have no
// testing.TB.
func SharedCluster() *Cluster { return shared }
