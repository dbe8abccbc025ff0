package relay

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// A program that embeds the relay links no broker client unless it uses one: relay takes its
// destination as a publisher.Opener, and only the CLI (which builds natsdest and kafkadest from
// flags and YAML) links nats.go and franz-go. The CLI's links are the control: the check sees
// them where they are.
func TestRelayLinksNoBrokerClient(t *testing.T) {
	t.Parallel()
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v (this test needs the go command on PATH)", pkg, err)
		}
		return strings.Fields(string(out))
	}
	brokers := []string{"github.com/nats-io/nats.go", "github.com/twmb/franz-go/pkg/kgo"}
	cli := deps("github.com/outbox-relay/outbox-relay/cmd/outbox-relay")
	for _, b := range brokers {
		if !slices.Contains(cli, b) {
			t.Fatalf("the CLI does not link %s: this check would prove nothing", b)
		}
	}
	for _, pkg := range deps("github.com/outbox-relay/outbox-relay/relay") {
		if strings.HasPrefix(pkg, "github.com/nats-io/") || strings.HasPrefix(pkg, "github.com/twmb/franz-go") {
			t.Errorf("relay links %s: a program embedding it would carry that broker client", pkg)
		}
	}
}
