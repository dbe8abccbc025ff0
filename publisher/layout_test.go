package publisher_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/golist"
)

const module = golist.Module

// goList runs go list with args and returns the fields of its output.
func goList(t *testing.T, args ...string) []string { t.Helper(); return golist.Fields(t, args...) }

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
