package fetch

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// postgresScript is the script, relative to the source root, that unpacks a PostgreSQL build
// from the npm registry; it holds the pinned versions, the cache layout and the lock.
const postgresScript = "scripts/install-postgres.sh"

// Postgres returns the bin directory of a PostgreSQL build of major version major (such as
// "15"), running scripts/install-postgres.sh, which unpacks it into the cache unless it is
// there. When it fetched, its one line saying what and where goes to Log.
func Postgres(ctx context.Context, major string) (string, error) {
	root, err := SourceRoot()
	if err != nil {
		return "", fmt.Errorf("fetch PostgreSQL %s: %w", major, err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		return "", fmt.Errorf("fetch PostgreSQL %s: %s needs bash on PATH", major, postgresScript)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, postgresScript), major)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err() // stopped, not broken
		}
		return "", fmt.Errorf("fetch PostgreSQL %s: %s %s: %w: %s", major, postgresScript, major, err,
			strings.TrimSpace(stderr.String()))
	}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(line, "install-postgres: fetched ") {
			fmt.Fprintln(Log, line)
		}
	}
	return strings.TrimSpace(stdout.String()), nil
}
