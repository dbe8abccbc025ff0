package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// slotEpoch is a slot created again after the slot-drop fault. Transactions that committed
// before it (After(tx) at or below LSN) are not its to carry: the relay's backfill delivers
// them. So the confirm check does not hold samples taken after At against them.
type slotEpoch struct {
	At  time.Time     // just before the old slot was dropped
	LSN pglogrepl.LSN // the new slot's first confirmed position
}

// slotDrop drops the slot as an administrator would while the relays run: terminate the
// walsender, then pg_drop_replication_slot (again until the drop beats the relay's reconnect).
// Every relay then exits, saying a restart backfills; a new one (what a supervisor does)
// creates the slot again and must deliver everything, in order.
func (t *harness) slotDrop(ctx context.Context) {
	old := t.fleet.alive()
	t.fleet.expectExit(old)
	at := time.Now()
	if err := dropSlotNow(ctx, t.outDSN, slotName); err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("slot-drop: %v", err))
		return
	}
	for _, p := range old {
		select {
		case <-p.done:
		case <-time.After(takeoverLimit):
			t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("slot-drop: relay-%d still runs without its slot", p.id))
			return
		case <-ctx.Done():
			return
		}
	}
	start := time.Now()
	if _, err := t.fleet.start(); err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("slot-drop: restart: %v", err))
		return
	}
	if _, err := t.fleet.waitLeader(ctx, takeoverLimit); err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("slot-drop: %v", err))
		return
	}
	t.faults.SlotDrops = append(t.faults.SlotDrops, time.Since(start))
	lsn, err := confirmedLSN(ctx, t.outDSN, slotName)
	if err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("slot-drop: read the new slot: %v", err))
		return
	}
	t.epochs = append(t.epochs, slotEpoch{At: at, LSN: lsn})
}

// dropSlotNow terminates the slot's walsender and drops the slot, retrying for a while when a
// relay takes the slot again in between.
func dropSlotNow(ctx context.Context, dsn, slot string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
			WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("drop the slot: %w", err)
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return errors.Join(err, ctx.Err())
		}
	}
}

// expectExit marks ps as ending by our doing, so their exits are not counted as crashes.
func (f *fleet) expectExit(ps []*relayProc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range ps {
		p.ours = true
	}
}

// epochFor returns the LSN below which transactions are not the sampled slot's to carry: that
// of the latest epoch begun before s was taken, or 0.
func epochFor(epochs []slotEpoch, s sample) pglogrepl.LSN {
	var lsn pglogrepl.LSN
	for _, e := range epochs {
		if !s.At.Before(e.At) {
			lsn = max(lsn, e.LSN)
		}
	}
	return lsn
}
