package relaytest

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds, and fails the test (naming what it waited for) if it does
// not within timeout. It is the one way tests wait: before a negative assertion, wait for an
// observable sign that the thing that must not happen had its chance (a status update sent, a
// later event delivered), never for a fixed time.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
