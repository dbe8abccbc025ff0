package pgcluster

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// FindBinDir returns the directory that holds initdb and postgres, trying PG_BIN,
// `pg_config --bindir`, Debian's /usr/lib/postgresql/<newest>/bin, then PATH. With PG_VERSION=N
// (and no PG_BIN) it looks only for version N (versions.go).
func FindBinDir() (string, error) {
	if v := os.Getenv("PG_VERSION"); v != "" && os.Getenv("PG_BIN") == "" {
		return versionBinDir(v)
	}
	for _, dir := range candidateDirs() {
		if hasServer(dir) {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

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
	return dirs
}

// debianBinDirs lists /usr/lib/postgresql/*/bin, newest major version first.
func debianBinDirs() []string {
	entries, _ := os.ReadDir("/usr/lib/postgresql")
	var versions []int
	for _, e := range entries {
		if v, err := strconv.Atoi(e.Name()); err == nil {
			versions = append(versions, v)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(versions)))
	dirs := make([]string, 0, len(versions))
	for _, v := range versions {
		dirs = append(dirs, fmt.Sprintf("/usr/lib/postgresql/%d/bin", v))
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
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name); len(m) > 0 {
		return m[len(m)-1]
	}
	return filepath.Join(binDir, name)
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}
