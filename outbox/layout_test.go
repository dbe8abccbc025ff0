package outbox_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Producers import outbox: it links no JSON Schema library and not the catalog, which a
// producer that validates payloads imports itself. catalog's links are the control.
func TestOutboxLinksNoSchemaValidator(t *testing.T) {
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v (this test needs the go command on PATH)", pkg, err)
		}
		return strings.Fields(string(out))
	}
	const validator = "github.com/santhosh-tekuri/jsonschema/v6"
	if !slices.Contains(deps("github.com/outbox-relay/outbox-relay/catalog"), validator) {
		t.Fatalf("catalog does not link %s: this check would prove nothing", validator)
	}
	for _, pkg := range deps("github.com/outbox-relay/outbox-relay/outbox") {
		if pkg == validator || pkg == "github.com/outbox-relay/outbox-relay/catalog" {
			t.Errorf("outbox links %s: every producer would carry it", pkg)
		}
	}
}
