package pgstore_test

import (
	"os"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestMain starts the cluster the conformance suite runs on (under -short none, and it skips).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }
