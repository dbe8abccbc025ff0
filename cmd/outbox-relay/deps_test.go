package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The binary users run must not link test harnesses (which start clusters and import testing),
// example programs, or package testing itself: the demo is built from pgcluster and inbox.
func TestBinaryLinksNoTestCode(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs `go list`: put the go command on PATH: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	var bad []string
	for _, pkg := range strings.Fields(string(out)) {
		if testOnly(pkg) {
			bad = append(bad, pkg)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("outbox-relay links test or example code: %s; import internal/pgcluster (not pgtest) "+
			"and public packages (not examples/) from code the binary ships", strings.Join(bad, ", "))
	}
}

func testOnly(pkg string) bool {
	const module = "github.com/outbox-relay/outbox-relay/"
	switch {
	case pkg == "testing", strings.HasPrefix(pkg, "testing/"):
		return true
	case pkg == module+"internal/pgtest", pkg == module+"internal/relaytest", pkg == module+"internal/natstest",
		pkg == module+"internal/kafkatest":
		return true
	case strings.HasPrefix(pkg, module+"examples/"):
		return true
	}
	return false
}

func TestTestOnlyNamesTheHarnesses(t *testing.T) {
	for pkg, want := range map[string]bool{
		"testing":           true,
		"testing/fstest":    true,
		"internal/synctest": false, // the runtime's, not package testing
		"github.com/outbox-relay/outbox-relay/internal/pgtest":             true,
		"github.com/outbox-relay/outbox-relay/internal/relaytest":          true,
		"github.com/outbox-relay/outbox-relay/examples/consumer/warehouse": true,
		"github.com/outbox-relay/outbox-relay/internal/pgcluster":          false,
		"github.com/outbox-relay/outbox-relay/inbox":                       false,
	} {
		if got := testOnly(pkg); got != want {
			t.Errorf("testOnly(%s) = %v, want %v", pkg, got, want)
		}
	}
}
