package relay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// The slot dropped while the relay streams (its walsender terminated so the slot can go): the
// relay does not take the refused restart for a lost connection and retry forever; Run returns
// ErrSlotMissing, whose message says what was lost and what to do.
func TestSlotDroppedWhileStreamingEndsTheRunWithErrSlotMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.start(nil)
	res := e.produce(relaytest.Workload{Events: 10, Aggregates: 2, MaxTxSize: 2})
	requireOK(t, e.waitDelivered(res, 30*time.Second)) // streaming works before the drop
	ctx := context.Background()
	waitFor(t, 30*time.Second, "the slot dropped from under the relay", func() bool {
		// pg_terminate_backend with a timeout waits for the walsender to exit; the relay
		// reconnects after a backoff, so the drop usually wins, and is retried when it does not.
		_, err := e.pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slot)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, e.slot)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ObjectInUse { // the relay got back first
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return true
	})
	select {
	case err := <-r.done:
		close(r.done)
		if !errors.Is(err, cdc.ErrSlotMissing) || !strings.Contains(err.Error(), "restart: the new slot backfills") {
			t.Fatalf("Run returned %v, want ErrSlotMissing naming what to do", err)
		}
		t.Log(err)
	case <-time.After(60 * time.Second):
		t.Fatal("the relay still runs 60s after its slot was dropped")
	}
}
