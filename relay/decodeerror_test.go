package relay

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// waitExit waits for a relay to end on its own and returns its error.
func (r *running) waitExit(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		close(r.done)
		return err
	case <-time.After(within):
		t.Fatalf("relay still running after %s", within)
	}
	return nil
}

// Issue: a table altered while the relay ran made every reconnect fail to decode, logged as a
// lost connection and retried forever. It is reported as a decode error naming the fix, and not
// retried; the slot does not confirm the undecodable transaction.
func TestDecodeErrorMidStreamIsNotALostConnection(t *testing.T) {
	// Not parallel: compares the slot's confirmed position with the cluster's WAL position, which other tests move while they run.
	e := newEnv(t)
	var logs relaytest.SyncBuffer
	r := e.start(func(c *Config) {
		c.Logger = zerolog.New(io.MultiWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.WarnLevel)
	})
	res := e.produce(relaytest.Workload{Events: 5, Aggregates: 1, MaxTxSize: 1})
	requireOK(t, e.waitDelivered(res, 30*time.Second))
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `ALTER TABLE outbox_events RENAME COLUMN event_type TO kind`); err != nil {
		t.Fatal(err)
	}
	before := e.currentLSN()
	if _, err := e.pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, kind, payload)
		VALUES ('order', 'x', 'Created', '{}')`); err != nil {
		t.Fatal(err)
	}
	err := r.waitExit(t, 60*time.Second)
	t.Log(err)
	if !errors.Is(err, cdc.ErrDecode) || !strings.Contains(err.Error(), "pg_drop_replication_slot") {
		t.Fatalf("relay ended with %v, want a decode error naming the fix", err)
	}
	if n := r.metric(t, "outbox_relay_reconnects_total"); n != 0 {
		t.Fatalf("reconnects_total = %v: a decode error was retried as a lost connection", n)
	}
	if strings.Contains(logs.String(), "connection lost") || !strings.Contains(logs.String(), "cannot be decoded") {
		t.Fatalf("logs do not report a decode error as such:\n%s", logs.String())
	}
	if confirmed, _ := e.slotLSNs(); confirmed > before {
		t.Fatalf("slot confirmed %d, past the undecodable transaction after %d", confirmed, before)
	}
}
