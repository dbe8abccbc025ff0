package settings

import (
	"errors"
	"strings"
	"testing"
)

func TestOneDestination(t *testing.T) {
	if err := OneDestination("webhook"); err != nil {
		t.Fatalf("one destination refused: %v", err)
	}
	for _, given := range [][]string{nil, {"--webhook-url", "--nats-url"}, {"webhook", "nats", "kafka"}} {
		err := OneDestination(given...)
		if !errors.Is(err, ErrDestination) {
			t.Fatalf("OneDestination(%q) = %v, want ErrDestination", given, err)
		}
		for _, name := range given[:min(len(given), 2)] {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("OneDestination(%q) = %q does not name %s", given, err, name)
			}
		}
	}
}
