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
