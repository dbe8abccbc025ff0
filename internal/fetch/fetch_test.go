package fetch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a Log that several goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// emptyCache points the cache at a new directory that the `postgres` user can enter (when
// root) and captures Log.
func emptyCache(t *testing.T) (string, *syncBuffer) {
	t.Helper()
	dir, err := os.MkdirTemp("", "outbox-relay-fetch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(CacheEnv, dir)
	t.Setenv("OUTBOX_RELAY_PG_CACHE", "")
	var log syncBuffer
	orig := Log
	Log = &log
	t.Cleanup(func() { Log = orig })
	return dir, &log
}

// Test packages start at once and may all find no server: one of them fetches, the others
// wait and get the same, whole result, and only the one that fetched says so.
func TestConcurrentFetchesFetchOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	cache, log := emptyCache(t)
	const n = 3
	var wg sync.WaitGroup
	pg, nats := make([]string, n), make([]string, n)
	errs := make([]error, 2*n)
	for i := range n {
		wg.Go(func() { pg[i], errs[i] = Postgres(context.Background(), "15") })
		wg.Go(func() { nats[i], errs[n+i] = NATSServer(context.Background()) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < n; i++ {
		if pg[i] != pg[0] || nats[i] != nats[0] {
			t.Fatalf("concurrent fetches disagree: PostgreSQL %q, nats-server %q", pg, nats)
		}
	}
	if !strings.HasPrefix(pg[0], cache) || !strings.HasPrefix(nats[0], cache) {
		t.Fatalf("fetched outside the cache %s: %s, %s", cache, pg[0], nats[0])
	}
	assertSaid(t, log.String(), "install-postgres: fetched PostgreSQL 15.", filepath.Dir(filepath.Dir(pg[0])))
	assertSaid(t, log.String(), "fetch: built nats-server v", nats[0])
	assertRuns(t, filepath.Join(pg[0], "postgres"), "(PostgreSQL) 15.")
	assertRuns(t, nats[0], "nats-server: v")

	// Again: found in the cache, nothing said.
	before := log.String()
	if p, err := Postgres(context.Background(), "15"); err != nil || p != pg[0] {
		t.Fatalf("second Postgres = %q, %v; want %q", p, err, pg[0])
	}
	if p, err := NATSServer(context.Background()); err != nil || p != nats[0] {
		t.Fatalf("second NATSServer = %q, %v; want %q", p, err, nats[0])
	}
	if after := log.String(); after != before {
		t.Errorf("a cached server was fetched again: %q", strings.TrimPrefix(after, before))
	}
}

// assertSaid checks that exactly one line of log starts with prefix and that it names where.
func assertSaid(t *testing.T, log, prefix, where string) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, prefix) {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], where) {
		t.Errorf("want one line %q... naming %s, got %q in:\n%s", prefix, where, lines, log)
	}
}

func assertRuns(t *testing.T, bin, want string) {
	t.Helper()
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), want) {
		t.Errorf("%s --version: %v, %q; want %q", bin, err, out, want)
	}
}

// Outside the source tree there is nothing to fetch with: the error says so, and no cache is
// touched.
func TestFetchOutsideTheSourceTreeSaysWhy(t *testing.T) {
	cache, log := emptyCache(t)
	root := sourceRootForTest(t)
	t.Chdir(t.TempDir()) // and the test binary lives in a build directory outside it too
	if _, err := SourceRoot(); err == nil {
		t.Fatal("SourceRoot found a source tree above a temp dir")
	}
	if _, err := Postgres(context.Background(), "15"); err == nil || !strings.Contains(err.Error(), "source tree") {
		t.Errorf("Postgres outside the tree: err = %v, want one about the source tree", err)
	}
	if _, err := NATSServer(context.Background()); err == nil || !strings.Contains(err.Error(), "source tree") {
		t.Errorf("NATSServer outside the tree: err = %v, want one about the source tree", err)
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 || log.String() != "" {
		t.Errorf("cache %s has %d entries, log %q; want both empty", cache, len(entries), log.String())
	}
	// Positive control: from inside the tree it is found.
	t.Chdir(filepath.Join(root, "internal"))
	if got, err := SourceRoot(); err != nil || got != root {
		t.Errorf("SourceRoot from internal/ = %q, %v; want %q", got, err, root)
	}
}

// sourceRootForTest is two directories above this package.
func sourceRootForTest(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(filepath.Dir(wd))
}
