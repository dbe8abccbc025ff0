// Package golist runs `go list` for the layout tests, which check what a package links.
package golist

import (
	"os/exec"
	"strings"
	"testing"
)

// Module is this module's path.
const Module = "github.com/outbox-relay/outbox-relay"

// Fields runs go list with args and returns the fields of its output; it fails t when the go
// command is missing or go list fails.
func Fields(t testing.TB, args ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("this test runs `go list`: put the go command on PATH: %v", err)
	}
	out, err := exec.Command(gobin, append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}

// Standard reports whether pkg is in the standard library (its first element has no dot).
func Standard(pkg string) bool { return !strings.Contains(strings.SplitN(pkg, "/", 2)[0], ".") }
