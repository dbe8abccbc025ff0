package cdc_test

import (
	"os"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestMain starts the cluster of the tests that stream from a real slot (under -short none, and
// they skip).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }
