// Command fetchservers finds the servers `make test` runs, PostgreSQL (as the test harness
// does: PG_BIN, PG_VERSION and the rest, see package pgcluster) and nats-server (as the demo
// does), and fetches what is missing (package fetch) before the test packages start: go test
// hides what a passing package prints, so the one line a fetch writes would otherwise go
// unseen. It prints nothing when both are installed, and exits 1 with the install hints when
// one is missing and cannot be fetched.
package main

import (
	"fmt"
	"os"

	"github.com/outbox-relay/outbox-relay/internal/demo"
	"github.com/outbox-relay/outbox-relay/internal/pgcluster"
)

func main() {
	code := 0
	if _, err := pgcluster.FindBinDir(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	if _, err := demo.NATSServerBin(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}
