package publisher_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/outbox-relay/outbox-relay"

// goList runs go list with args and returns the fields of its output.
func goList(t *testing.T, args ...string) []string {
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

// deps returns the packages pkg links, itself included.
func deps(t *testing.T, pkg string) []string { return goList(t, "-deps", pkg) }

// The engine links no destination, so a program that brings its own links neither the webhook nor
// a broker client (the contract is package destination; its own layout test keeps it a leaf).
func TestTheEngineLinksNoDestination(t *testing.T) {
	linked := deps(t, module+"/publisher")
	if !slices.Contains(linked, module+"/destination") {
		t.Fatal("the engine does not link the destination contract: this check would prove nothing")
	}
	for _, pkg := range linked {
		if strings.HasPrefix(pkg, module+"/destination/") || strings.HasPrefix(pkg, module+"/publisher/") ||
			strings.HasPrefix(pkg, "github.com/nats-io/") || strings.HasPrefix(pkg, "github.com/twmb/franz-go") {
			t.Errorf("the engine links %s: destinations plug into it, it imports none", pkg)
		}
	}
}
