// Package tests is the root of the tests module: the proofs and the tests that need
// dependencies the library does not (README: Testing). This file checks the module itself.
package tests

import (
	"os/exec"
	"strings"
	"testing"
)

// goList runs `go list` in dir and returns its output's lines as fields.
func goList(t *testing.T, dir string, args ...string) [][]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v in %s: %v", args, dir, err)
	}
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			rows = append(rows, f)
		}
	}
	return rows
}

// The tests build the library with the versions its users get: every module that the root
// module's packages link is selected at the same version here, although nats-server, kfake and
// the rest require their own (MVS takes the highest, so one of them could raise, say, x/sys
// for the tests only).
func TestLibraryModulesAtTheRootsVersions(t *testing.T) {
	root := map[string]string{}
	for _, f := range goList(t, "..", "-deps", "-f", "{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}", "./...") {
		if len(f) == 2 {
			root[f[0]] = f[1]
		}
	}
	// Positive control: the list is the library's.
	if root["github.com/jackc/pgx/v5"] == "" {
		t.Fatalf("the root's packages link no pgx? %v", root)
	}
	here := map[string]string{}
	for _, f := range goList(t, ".", "-m", "-f", "{{.Path}} {{.Version}}", "all") {
		if len(f) == 2 {
			here[f[0]] = f[1]
		}
	}
	for path, v := range root {
		if got := here[path]; got != v {
			t.Errorf("tests/go.mod selects %s %s, the root %s: the tests would not build what users build; "+
				"raise it in the root's go.mod (go get %s@%s there) or pin it here", path, got, v, path, got)
		}
	}
}
