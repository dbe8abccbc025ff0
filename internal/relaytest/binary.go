package relaytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var relayBin struct {
	once sync.Once
	path string
	err  error
}

// RelayBinary builds cmd/outbox-relay once per test binary and returns its path, for tests that
// run the relay as an operator does (by its flags, killed with a signal). A package that calls
// it removes the build with RemoveRelayBinary in its TestMain, after the tests ran.
func RelayBinary(t testing.TB) string {
	t.Helper()
	relayBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "outbox-relay-bin-")
		if err != nil {
			relayBin.err = err
			return
		}
		relayBin.path = filepath.Join(dir, "outbox-relay")
		out, err := exec.Command("go", "build", "-o", relayBin.path, "github.com/outbox-relay/outbox-relay/cmd/outbox-relay").CombinedOutput()
		if err != nil {
			relayBin.err = fmt.Errorf("%w: %s", err, out)
		}
	})
	if relayBin.err != nil {
		t.Fatalf("build relay: %v", relayBin.err)
	}
	return relayBin.path
}

// RemoveRelayBinary removes what RelayBinary built, if anything.
func RemoveRelayBinary() {
	if relayBin.path != "" {
		_ = os.RemoveAll(filepath.Dir(relayBin.path))
	}
}
