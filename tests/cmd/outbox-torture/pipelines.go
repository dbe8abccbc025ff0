package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// With TORTURE_PIPELINES=2 the relays run --config with two pipelines: "default" on the
// torture slot to the checking receiver (everything the one-pipeline run checks), and
// "second", filtered to the aggregates whose id ends in secondSuffix, on its own slot, to a
// plain receiver. The same processes stream both, so every relay fault hits both; the second
// is checked for no loss, no phantom (a row its filter refuses counts as one) and order per
// aggregate.
const (
	secondSlot   = slotName + "_second"
	secondSuffix = "1"
	secondFilter = "aggregate_id LIKE '%" + secondSuffix + "'"
)

// secondResult is what the second pipeline's check found.
type secondResult struct {
	Expected, Delivered, Duplicates int
	Lost, Phantoms, Order           []string
	Drained                         bool
}

func (s *secondResult) ok() bool {
	return s.Drained && len(s.Lost)+len(s.Phantoms)+len(s.Order) == 0
}

// configArgs writes the two-pipeline file into dir and returns the relay's flags for it,
// otherwise those of relayArgs.
func configArgs(dir, dsn, url, secondURL string) ([]string, error) {
	conf := fmt.Sprintf(`pipelines:
  - name: default
    slot: %[1]s
    publication: %[1]s
    initial: pending          # a dropped slot is recreated with a backfill, as with the flags
    webhook: {url: "%[2]s", secret: "%[3]s", request_timeout: 1s}
    retry_min: 20ms
    retry_max: 1s
    max_attempts: -1
  - name: second
    slot: %[4]s
    publication: %[4]s
    filter: "%[5]s"
    initial: pending
    webhook: {url: "%[6]s", secret: "%[3]s", request_timeout: 1s}
    retry_min: 20ms
    retry_max: 1s
    max_attempts: -1
`, slotName, url, secret, secondSlot, secondFilter, secondURL)
	path := filepath.Join(dir, "pipelines.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return []string{"run", "--config", path, "--dsn", dsn, "--status-interval", "1s", "--shutdown-timeout", "5s",
		"--replication-timeout", relayReplicationTimeout.String(), "--log-format", "json", "--log-level", "info"}, nil
}

// secondExpected returns the committed events the second pipeline's filter passes, in the
// relaytest form.
func (t *harness) secondExpected() relaytest.Result {
	t.ledger.mu.Lock()
	defer t.ledger.mu.Unlock()
	var res relaytest.Result
	for _, tx := range t.ledger.txs {
		for _, e := range tx.Events {
			if strings.HasSuffix(e.Aggregate, secondSuffix) {
				res.Committed = append(res.Committed, relaytest.Committed{ID: e.ID, Aggregate: e.Aggregate, Seq: e.Seq})
			}
		}
	}
	return res
}

// checkSecond waits up to the drain timeout for the second pipeline to deliver what it should,
// then checks its deliveries.
func (t *harness) checkSecond(ctx context.Context) *secondResult {
	want := t.secondExpected()
	deadline := time.Now().Add(t.cfg.Drain)
	for {
		rep := relaytest.Check(want, t.recv2.Deliveries())
		if len(rep.Lost) == 0 || time.Now().After(deadline) || !sleep(ctx, 100*time.Millisecond) {
			t.logf("second pipeline: %s", rep)
			return &secondResult{Expected: rep.Committed, Delivered: rep.Delivered, Duplicates: rep.Duplicates,
				Lost: rep.Lost, Phantoms: rep.Phantoms, Order: rep.OrderViolations, Drained: len(rep.Lost) == 0}
		}
	}
}
