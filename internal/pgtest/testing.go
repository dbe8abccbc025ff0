package pgtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// shared is the cluster of the current test binary, set by Main (under -short, by the first
// SharedCluster).
var shared *Cluster

// Under -short (go test -short, the fast loop) Main starts no cluster: tests that ask for one
// skip, and only the examples, which cannot skip, start it, once, on first use.
var (
	short    bool
	lazyOnce sync.Once
	lazyOpts Options
)

// Main starts one cluster for a test package, runs its tests, then removes the cluster, and
// returns the exit code for TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }
//
// Cleanup runs before the exit code is returned, so nothing is left running or on disk. When no
// server binaries are found, it prints which package to install and fails (never skips). Under
// -short it starts none, and tests that ask for a database skip.
func Main(m *testing.M, opts Options) int {
	if !flag.Parsed() {
		flag.Parse() // testing.Short reads the flags; m.Run would parse them only later
	}
	if testing.Short() {
		short, lazyOpts = true, opts
		code := m.Run()
		if shared != nil {
			shared.Close()
		}
		return code
	}
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
	if short {
		t.Skip("needs a PostgreSQL cluster: runs without -short (make test)")
	}
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
// testing.TB. Under -short it starts the cluster on first use (examples cannot skip).
func SharedCluster() *Cluster {
	if short {
		lazyOnce.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, err := Start(ctx, lazyOpts)
			if err != nil {
				fmt.Fprintln(os.Stderr, "pgtest:", err)
				return
			}
			shared = c
		})
	}
	return shared
}

// LongEnv is the environment variable that runs the long tests: the soak and torture runs that
// `make test` leaves to `make test-long`, which CI runs in a later stage of .ci/run.
const LongEnv = "OUTBOX_RELAY_LONG_TESTS"

// Long skips t, saying where it runs, unless LongEnv is set: a test of minutes whose guarantee is
// also checked, more briefly, by the default suite's own tests, and in full by `make test-long`.
func Long(t testing.TB) {
	t.Helper()
	if os.Getenv(LongEnv) == "" {
		t.Skipf("a long soak or torture run: make test-long runs it (and CI, in a later stage of .ci/run); "+
			"or set %s=1", LongEnv)
	}
}
