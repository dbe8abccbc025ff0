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

// The seam between the engine and the destinations: a destination works on an
// envelope.Message and answers the engine's Result, and never imports the stream (cdc), whose
// transactions and control records are the engine's business; the engine links no
// destination, so a program that brings its own links neither the webhook nor a broker
// client; and the message type is a leaf.
func TestDestinationsSeeTheMessageNotTheStream(t *testing.T) {
	for _, dest := range []string{"publisher/webhook", "publisher/natsdest", "publisher/kafkadest"} {
		t.Run(dest, func(t *testing.T) {
			imports := goList(t, "-f", `{{join .Imports " "}}`, module+"/"+dest)
			if !slices.Contains(imports, module+"/envelope") {
				t.Fatalf("%s does not import envelope: this check would prove nothing", dest)
			}
			if slices.Contains(imports, module+"/cdc") {
				t.Errorf("%s imports cdc: a destination works on envelope.Message only", dest)
			}
		})
	}
	t.Run("publisher", func(t *testing.T) {
		for _, pkg := range deps(t, module+"/publisher") {
			if strings.HasPrefix(pkg, module+"/publisher/") || strings.HasPrefix(pkg, "github.com/nats-io/") ||
				strings.HasPrefix(pkg, "github.com/twmb/franz-go") {
				t.Errorf("the engine links %s: destinations plug into it, it imports none", pkg)
			}
		}
	})
	t.Run("envelope", func(t *testing.T) {
		for _, pkg := range deps(t, module+"/envelope") {
			if pkg != module+"/envelope" && strings.Contains(strings.SplitN(pkg, "/", 2)[0], ".") {
				t.Errorf("envelope links %s: the message type must stay a leaf (standard library only)", pkg)
			}
		}
	})
}
