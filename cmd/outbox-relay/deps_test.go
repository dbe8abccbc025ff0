package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
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
	case pkg == module+"internal/pgtest", pkg == module+"internal/relaytest":
		return true
	case strings.HasPrefix(pkg, module+"tests/"): // the tests module: proofs and broker harnesses
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
		"github.com/outbox-relay/outbox-relay/tests/internal/natstest":     true,
		"github.com/outbox-relay/outbox-relay/examples/consumer/warehouse": true,
		"github.com/outbox-relay/outbox-relay/internal/pgcluster":          false,
		"github.com/outbox-relay/outbox-relay/inbox":                       false,
	} {
		if got := testOnly(pkg); got != want {
			t.Errorf("testOnly(%s) = %v, want %v", pkg, got, want)
		}
	}
}

// What users copy imports only what they can import: no example_test.go, and no program of
// examples/ (its tests aside, which need the test cluster), imports an internal package.
func TestExamplesImportNoInternalPackage(t *testing.T) {
	const internal = `"github.com/outbox-relay/outbox-relay/internal/`
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		example := filepath.Base(path) == "example_test.go" ||
			strings.HasPrefix(rel, "examples"+string(filepath.Separator)) && !strings.HasSuffix(path, "_test.go")
		if !example {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if strings.HasPrefix(imp.Path.Value, internal) {
				t.Errorf("%s imports %s: users who copy it cannot; use public packages (a helper in another _test.go file "+
					"can give an example its database)", rel, imp.Path.Value)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
