package cdc_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/golist"
)

const module = golist.Module

// goList runs go list with args and returns the fields of its output.
func goList(t *testing.T, args ...string) []string { t.Helper(); return golist.Fields(t, args...) }

// Layers do not reach sideways: the stream checks the schema through internal/schemacheck,
// which the status report uses too, and never links the status report (internal/inspect); the
// packages below the stream stay leaves of this module.
func TestStreamReachesNoSideways(t *testing.T) {
	deps := goList(t, "-deps", module+"/cdc")
	if !slices.Contains(deps, module+"/internal/schemacheck") {
		t.Fatal("cdc does not link internal/schemacheck: this check would prove nothing")
	}
	if slices.Contains(deps, module+"/internal/inspect") {
		t.Error("cdc links internal/inspect: the schema check belongs in internal/schemacheck, where both use it")
	}
	for pkg, allowed := range map[string][]string{
		"internal/schema":      nil,
		"internal/schemacheck": {"internal/schema", "migrations"},
		"internal/retry":       nil,
		"internal/diagnose":    nil,
		"internal/state":       {"internal/schema"},
	} {
		for _, dep := range goList(t, "-deps", module+"/"+pkg) {
			own, ok := strings.CutPrefix(dep, module+"/")
			if ok && own != pkg && !slices.Contains(allowed, own) {
				t.Errorf("%s links %s: it is a leaf of this module (it may link %v)", pkg, own, allowed)
			}
		}
	}
}
