package demo

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// requireNATSServer fails (never skips) without the nats-server binary, installed or built from
// the Go module, naming the fix (the error does), as the PostgreSQL harness does without its
// binaries.
func requireNATSServer(t *testing.T) {
	t.Helper()
	if _, err := NATSServerBin(); err != nil {
		t.Fatalf("%v\nthe NATS demo test runs the real nats-server", err)
	}
}

func TestRunNATSAppliesEveryOrderOnceThroughBrokerRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers of its own or runs long: skipped under -short")
	}
	t.Parallel()
	requireNATSServer(t)
	var out relaytest.SyncBuffer
	var c cluster
	var natsDir, natsURL string
	f, written := runToSummary(t, &c, &out, Config{
		// Outages longer than the demo's publish timeout (2s): a shorter one is covered by the
		// client's reconnect buffer, and no publish fails.
		NATS: true, Duration: 8 * time.Second, Rate: 100,
		FailEvery: 1500 * time.Millisecond, FailFor: 2500 * time.Millisecond, LoseEvery: 10,
		ProgressInterval: time.Second, DrainTimeout: time.Minute,
		NATSStarted: func(dir, url string) { natsDir, natsURL = dir, url },
	})
	// No loss, no double effect: every order published (PubAck'd) and reserved exactly once,
	// across the broker's restarts and the redeliveries.
	if f["delivered"] != written || f["reservations"] != written {
		t.Errorf("delivered=%d reservations=%d, want both = written=%d\n%s", f["delivered"], f["reservations"], written, out.String())
	}
	restarts := strings.Count(out.String(), "demo: nats-server restarted on the same port and store")
	if restarts == 0 || !strings.Contains(out.String(), "demo: nats-server killed (SIGKILL)") {
		t.Errorf("no broker restart during the run (restarts=%d):\n%s", restarts, out.String())
	}
	if f["retries"] == 0 {
		t.Error("retries=0: publishes while nats-server was down should have failed and been retried")
	}
	if f["duplicates_absorbed"] == 0 {
		t.Error("duplicates_absorbed=0: lost acks should have been redelivered by JetStream and absorbed by the inbox")
	}
	for _, want := range []string{"broker=ok", "stopped nats-server and removed its store"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// Nothing left: the store is removed and no server answers on its port (it did during the
	// run: the orders went through it).
	if natsDir == "" || natsURL == "" {
		t.Fatal("NATSStarted was not called")
	}
	if _, err := os.Stat(natsDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("nats-server store %s still exists (stat: %v)", natsDir, err)
	}
	if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(natsURL, "nats://"), time.Second); err == nil {
		conn.Close()
		t.Errorf("something still listens at %s after Run returned", natsURL)
	}
	t.Logf("written=%d broker restarts=%d retries=%d duplicates_absorbed=%d", written, restarts, f["retries"], f["duplicates_absorbed"])
}

func TestRunNATSWithoutServerBinarySaysWhatToInstall(t *testing.T) {
	t.Setenv(NATSServerEnv, "/nonexistent/nats-server")
	var out relaytest.SyncBuffer
	err := Run(context.Background(), Config{NATS: true, Out: &out,
		ClusterStarted: func(string) { t.Error("started a cluster although nats-server is missing") }})
	if !errors.Is(err, ErrNoNATSServer) {
		t.Fatalf("err = %v, want ErrNoNATSServer", err)
	}
	if !strings.Contains(err.Error(), NATSInstallHint) || !strings.Contains(err.Error(), NATSServerEnv) {
		t.Errorf("error does not name the install command and %s: %v", NATSServerEnv, err)
	}
	if strings.Contains(out.String(), "written=") {
		t.Errorf("printed a summary of a demo that never ran: %q", out.String())
	}
}
