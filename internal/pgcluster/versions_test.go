package pgcluster

import (
	"os"
	"strings"
	"testing"
)

func TestPGVersionErrorsNameTheFix(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_PG_CACHE", t.TempDir())
	if _, err := versionBinDir("seventeen"); err == nil || !strings.Contains(err.Error(), "major version") {
		t.Fatalf("PG_VERSION=seventeen: err = %v, want one that says it is not a major version", err)
	}
	_, err := versionBinDir("99")
	if err == nil || !strings.Contains(err.Error(), InstallVersionHint("99")) {
		t.Fatalf("PG_VERSION=99: err = %v, want one naming %q", err, InstallVersionHint("99"))
	}
	// Positive control: the same lookup finds an installed tree in the cache.
	bin := t.TempDir() + "/99/native/bin"
	t.Setenv("OUTBOX_RELAY_PG_CACHE", strings.TrimSuffix(bin, "/99/native/bin"))
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"initdb", "postgres"} {
		if err := os.WriteFile(bin+"/"+f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := versionBinDir("99"); err != nil || got != bin {
		t.Fatalf("versionBinDir(99) = %q, %v; want %q", got, err, bin)
	}
}
