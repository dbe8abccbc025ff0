package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const catalogFile = `event_types:
  - name: order.created
    description: An order was placed.
    schema:
      type: object
      required: [order_id]
      properties:
        order_id: {type: string}
    example: {order_id: o-1}
  - name: order.canceled
  - name: order.cancelled
    deprecated: true
    replaced_by: order.canceled
`

// sync fills the catalog from a file (a dry run first, which writes nothing), reports what it
// does not list and prunes it only when asked; list shows it; a bad file is exit 2 with the
// reason. Once the catalog holds types, `endpoint add` refuses a pattern that matches none with
// the nearest name and warns about a deprecated one.
func TestEventTypesCLI(t *testing.T) {
	dsn, _ := migratedDB(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "event-types.yaml")
	if err := os.WriteFile(file, []byte(catalogFile), 0o600); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (string, string, int) {
		return execCLI(t, nil, append(append([]string{"event-types"}, args...), "--dsn", dsn)...)
	}
	if out, errOut, code := cli("list"); code != 0 || !strings.Contains(out, "the catalog is empty") {
		t.Fatalf("list of an empty catalog: exit %d\n%s%s", code, out, errOut)
	}
	if _, _, code := endpointCLI(t, dsn, nil, "add", "--id", "early", "--url", "https://early.example/", "--event-types", "ordr.created"); code != 0 {
		t.Fatalf("an empty catalog checks nothing, yet add failed: exit %d", code)
	}
	out, errOut, code := cli("sync", file, "--dry-run")
	if code != 0 || !strings.Contains(out, "would be created: order.canceled, order.cancelled, order.created") || !strings.Contains(out, "nothing written") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, _ := cli("list"); !strings.Contains(out, "the catalog is empty") {
		t.Fatalf("the dry run wrote:\n%s", out)
	}
	if out, errOut, code := cli("sync", file); code != 0 || !strings.Contains(out, "created: order.canceled, order.cancelled, order.created") {
		t.Fatalf("sync: exit %d\n%s%s", code, out, errOut)
	}
	out, _, _ = cli("list")
	for _, want := range []string{"order.created", "An order was placed.", "use order.canceled"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}
	var listed []struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
	}
	if out, _, _ := cli("list", "--json"); json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 3 || listed[2].Schema == nil {
		t.Fatalf("list --json: %s", out)
	}

	_, errOut, code = endpointCLI(t, dsn, nil, "add", "--id", "typo", "--url", "https://typo.example/", "--event-types", "ordr.created")
	if code != 2 || !strings.Contains(errOut, "did you mean order.created?") {
		t.Fatalf("add with a pattern matching no type: exit %d\n%s", code, errOut)
	}
	_, errOut, code = endpointCLI(t, dsn, nil, "add", "--id", "old", "--url", "https://old.example/", "--event-types", "order.cancelled")
	if code != 0 || !strings.Contains(errOut, "warning: event-type pattern \"order.cancelled\" matches only deprecated types: order.cancelled (use order.canceled)") {
		t.Fatalf("add with a deprecated type: exit %d\n%s", code, errOut)
	}
	if _, errOut, code := endpointCLI(t, dsn, nil, "update", "early", "--url", "https://early.example/v2"); code != 0 {
		t.Fatalf("an update that keeps a pattern added before the catalog: exit %d\n%s", code, errOut)
	}

	short := filepath.Join(dir, "short.yaml")
	if err := os.WriteFile(short, []byte("event_types:\n  - name: order.created\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, code := cli("sync", short); code != 0 || !strings.Contains(out, "not in the file, kept (--prune removes them): order.canceled, order.cancelled") {
		t.Fatalf("sync of a shorter file: exit %d\n%s", code, out)
	}
	if out, _, code := cli("sync", short, "--prune"); code != 0 || !strings.Contains(out, "removed: order.canceled, order.cancelled") {
		t.Fatalf("sync --prune: exit %d\n%s", code, out)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("event_types:\n  - name: a.b\n    schema: {type: object}\n    example: [1]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := cli("sync", bad); code != 2 || !strings.Contains(errOut, "the example does not match the schema") {
		t.Fatalf("a bad file: exit %d\n%s", code, errOut)
	}
}

// The egress policy reaches `endpoint add` through the variables `run` reads: with
// OUTBOX_RELAY_EGRESS_DENY_PRIVATE a private URL is refused, OUTBOX_RELAY_EGRESS_ALLOW admits a
// range, and --deny-private marks one endpoint whatever the policy.
func TestEndpointAddAppliesTheEgressPolicy(t *testing.T) {
	dsn, _ := migratedDB(t)
	if _, _, code := endpointCLI(t, dsn, nil, "add", "--id", "internal", "--url", "http://10.1.2.3/hooks"); code != 0 {
		t.Fatalf("without a policy, an operator's private URL: exit %d", code)
	}
	deny := []string{"OUTBOX_RELAY_EGRESS_DENY_PRIVATE=true"}
	_, errOut, code := endpointCLI(t, dsn, deny, "add", "--id", "internal2", "--url", "http://10.1.2.3/hooks")
	if code != 2 || !strings.Contains(errOut, "10.1.2.3 is private") {
		t.Fatalf("with OUTBOX_RELAY_EGRESS_DENY_PRIVATE: exit %d\n%s", code, errOut)
	}
	allow := append(deny, "OUTBOX_RELAY_EGRESS_ALLOW=10.1.0.0/16")
	if _, errOut, code := endpointCLI(t, dsn, allow, "add", "--id", "internal3", "--url", "http://10.1.2.3/hooks"); code != 0 {
		t.Fatalf("with OUTBOX_RELAY_EGRESS_ALLOW: exit %d\n%s", code, errOut)
	}
	_, errOut, code = endpointCLI(t, dsn, nil, "add", "--id", "tenant", "--url", "http://127.0.0.1:8080/", "--deny-private")
	if code != 2 || !strings.Contains(errOut, "127.0.0.1 is loopback") {
		t.Fatalf("--deny-private: exit %d\n%s", code, errOut)
	}
	var got endpointJSON
	endpointOut(t, dsn, nil, &got, "add", "--id", "tenant", "--url", "https://partner.example/", "--deny-private", "--egress-proxy", "direct")
	if !got.DenyPrivate || got.EgressProxy == nil || *got.EgressProxy != "direct" {
		t.Fatalf("add --deny-private --egress-proxy direct: %+v", got)
	}
	if _, errOut, code := endpointCLI(t, dsn, nil, "update", "tenant", "--allow-private-url"); code != 2 || !strings.Contains(errOut, "clears deny_private first") {
		t.Fatalf("allow-private-url on a tenant's endpoint: exit %d\n%s", code, errOut)
	}
}
