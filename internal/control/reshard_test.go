package control_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// reshardEnv is one pipeline (its name unique in the cluster, slots being cluster-wide) with
// its old shards' slots created, and a WAL write after them, so the new slots start past them.
type reshardEnv struct {
	t    *testing.T
	dsn  string
	pool *pgxpool.Pool
	conn *pgx.Conn
	name string
	out  bytes.Buffer
}

func newReshardEnv(t *testing.T, name string, from int) *reshardEnv {
	t.Helper()
	e := &reshardEnv{t: t, name: name}
	e.dsn, e.pool = relaytest.MigratedDB(t)
	ctx := context.Background()
	var err error
	if e.conn, err = pgx.Connect(ctx, e.dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.conn.Close(context.Background()) })
	for _, s := range e.shards(from) {
		if _, err := cdc.Setup(ctx, e.dsn, s.Slot, s.Publication, cdc.SetupOptions{NoBackfill: true}); err != nil {
			t.Fatalf("create old shard %s: %v", s.Name, err)
		}
	}
	t.Cleanup(func() {
		// Slots are the cluster's: drop every one this test left.
		_, _ = e.pool.Exec(context.Background(), `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE slot_name LIKE $1 AND NOT active`, "outbox_relay_"+name+"%")
	})
	e.exec(`SELECT pg_logical_emit_message(true, 'test', 'after the old slots')`)
	return e
}

// shards names n shards as the relay does: the slot outbox_relay_NAME, or outbox_relay_NAME_sIofN.
func (e *reshardEnv) shards(n int) []control.Shard {
	base := "outbox_relay_" + e.name
	if n == 1 {
		return []control.Shard{{Name: e.name, Slot: base, Publication: base}}
	}
	var out []control.Shard
	for i := range n {
		sfx := fmt.Sprintf("_s%dof%d", i, n)
		out = append(out, control.Shard{Name: e.name + sfx, Slot: base + sfx, Publication: base + sfx})
	}
	return out
}

func (e *reshardEnv) resharder(to int, wait time.Duration) control.Resharder {
	return control.Resharder{DSN: e.dsn, Schema: "public", Pipeline: e.name, Slot: "outbox_relay_" + e.name, To: to,
		Shards: e.shards, Wait: wait, Out: &e.out}
}

func (e *reshardEnv) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *reshardEnv) row() control.Reshard {
	e.t.Helper()
	rs, ok, err := control.ReadReshard(context.Background(), e.pool, "public", e.name)
	if err != nil || !ok {
		e.t.Fatalf("read the reshard row: ok %t, %v", ok, err)
	}
	return rs
}

func (e *reshardEnv) fence() control.FenceProgress {
	e.t.Helper()
	p, err := control.RecordFence(context.Background(), e.pool, "public", e.row())
	if err != nil {
		e.t.Fatalf("RecordFence: %v", err)
	}
	return p
}

// confirmed returns the slots' confirmed positions (missing slots left out).
func (e *reshardEnv) confirmed(slots []string) map[string]string {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT slot_name, confirmed_flush_lsn::text FROM pg_replication_slots
		WHERE slot_name = ANY($1)`, slots)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	var slot, lsn string
	if _, err := pgx.ForEachRow(rows, []any{&slot, &lsn}, func() error { out[slot] = lsn; return nil }); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// advance moves an old slot to the fence, as its relay does once it delivered up to it.
func (e *reshardEnv) advance(slot, fence string) {
	e.exec(`SELECT pg_replication_slot_advance($1, $2::pg_lsn)`, slot, fence)
}

// The ordering guarantee, step by step: after step 1 every new slot stands at the fence and no
// new shard may deliver while any old slot is behind it; only when the last one confirms it is
// the fence recorded as reached, and only then are the old slots dropped and the reshard done.
func TestReshardStepsHoldTheNewShardsUntilEveryOldSlotConfirmsTheFence(t *testing.T) {
	e := newReshardEnv(t, "ctl_steps", 2)
	ctx := context.Background()
	old, now := e.shards(2), e.shards(3)
	oldSlots := []string{old[0].Slot, old[1].Slot}
	newSlots := []string{now[0].Slot, now[1].Slot, now[2].Slot}

	// Step 1, and step 2 waiting in vain: no relay delivers for the old slots.
	err := e.resharder(3, 0).Run(ctx, e.conn)
	if err == nil || !strings.Contains(err.Error(), "have not reached the fence") {
		t.Fatalf("first run: %v; want step 2 to give up waiting for the old slots", err)
	}
	rs := e.row()
	if rs.Fence == "" || rs.Reached != nil || rs.Finished != nil || rs.From != 2 || rs.To != 3 {
		t.Fatalf("after step 1: %+v; want a fence recorded, not reached, 2 -> 3", rs)
	}
	at := e.confirmed(newSlots)
	for _, s := range newSlots {
		if at[s] != rs.Fence {
			t.Errorf("new slot %s at %q, want it at the fence %s (created, then advanced)", s, at[s], rs.Fence)
		}
	}
	if got := e.confirmed(oldSlots); len(got) != 2 {
		t.Fatalf("old slots %v after step 1, want both still there", got)
	}

	// Step 2: the fence holds while any old slot is behind it.
	if p := e.fence(); p.Reached || !slices.Equal(p.Behind, oldSlots) {
		t.Fatalf("fence with both old slots behind: %+v; want not reached, behind %v", p, oldSlots)
	}
	e.advance(oldSlots[0], rs.Fence)
	if p := e.fence(); p.Reached || !slices.Equal(p.Behind, oldSlots[1:]) {
		t.Fatalf("fence with one old slot behind: %+v; want not reached, behind %v", p, oldSlots[1:])
	}
	if e.row().Reached != nil {
		t.Fatal("fence recorded as reached while an old slot is behind it")
	}
	e.advance(oldSlots[1], rs.Fence) // the positive control: now it is reached
	if p := e.fence(); !p.Reached {
		t.Fatalf("fence with every old slot at it: %+v; want reached", p)
	}
	if e.row().Reached == nil {
		t.Fatal("fence reached but not recorded")
	}

	// Steps 3 and 4: the old slots and publications dropped, the reshard done.
	if err := e.resharder(3, time.Minute).Run(ctx, e.conn); err != nil {
		t.Fatalf("run after the fence: %v", err)
	}
	if got := e.confirmed(oldSlots); len(got) != 0 {
		t.Errorf("old slots %v still there after step 3", got)
	}
	if got := e.confirmed(newSlots); len(got) != 3 {
		t.Errorf("new slots %v after the reshard, want all 3", got)
	}
	var pubs int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname = ANY($1)`,
		[]string{old[0].Publication, old[1].Publication}).Scan(&pubs); err != nil || pubs != 0 {
		t.Errorf("old publications left: %d (%v)", pubs, err)
	}
	if e.row().Finished == nil {
		t.Fatal("reshard not marked done after step 4")
	}
	if !strings.Contains(e.out.String(), "step 4/4: pipeline ctl_steps has 3 shards") {
		t.Errorf("output lacks step 4:\n%s", e.out.String())
	}

	// Done is done: the same request again changes nothing.
	e.out.Reset()
	if err := e.resharder(3, 0).Run(ctx, e.conn); err != nil || !strings.Contains(e.out.String(), "already has 3 shards") {
		t.Fatalf("run after done: %v, %q; want nothing to do", err, e.out.String())
	}
}

// An old slot dropped by hand before the fence keeps the new shards waiting and stops the
// command with the fix: what only that slot carried is recovered, not skipped.
func TestReshardOldSlotDroppedBeforeTheFenceStopsAndNamesTheFix(t *testing.T) {
	e := newReshardEnv(t, "ctl_lost", 2)
	ctx := context.Background()
	old := e.shards(2)
	if err := e.resharder(3, 0).Run(ctx, e.conn); err == nil {
		t.Fatal("first run returned nil with the old slots behind the fence")
	}
	e.exec(`SELECT pg_drop_replication_slot($1)`, old[0].Slot)
	err := e.resharder(3, 0).Run(ctx, e.conn)
	if err == nil || !strings.Contains(err.Error(), "were dropped before they confirmed the reshard's fence") ||
		!strings.Contains(err.Error(), "--recreate-slot") {
		t.Fatalf("run with an old slot dropped: %v; want the fix named", err)
	}
	p := e.fence()
	if p.Reached || !slices.Equal(p.Missing, []string{old[0].Slot}) {
		t.Fatalf("fence with an old slot dropped: %+v; want not reached, missing %s", p, old[0].Slot)
	}
	if e.row().Reached != nil {
		t.Fatal("fence recorded as reached with an old slot dropped before it")
	}
}

// One reshard at a time: another count while one is under way is refused, naming the one to
// finish; a dry run changes nothing.
func TestReshardRefusesAnotherCountUnderWayAndDryRunChangesNothing(t *testing.T) {
	e := newReshardEnv(t, "ctl_other", 2)
	ctx := context.Background()
	dry := e.resharder(3, 0)
	dry.DryRun = true
	if err := dry.Run(ctx, e.conn); err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if _, ok, err := control.ReadReshard(ctx, e.pool, "public", e.name); ok || err != nil {
		t.Fatalf("dry run recorded a reshard (ok %t, %v)", ok, err)
	}
	if got := e.confirmed([]string{e.shards(3)[0].Slot}); len(got) != 0 {
		t.Fatalf("dry run created new slots: %v", got)
	}
	if err := e.resharder(3, 0).Run(ctx, e.conn); err == nil {
		t.Fatal("first run returned nil with the old slots behind the fence")
	}
	err := e.resharder(4, 0).Run(ctx, e.conn)
	if err == nil || !strings.Contains(err.Error(), "from 2 to 3 shards is under way: finish it (--to 3) first") {
		t.Fatalf("another count under way: %v", err)
	}
	if errors.Is(err, control.ErrSlotActive) {
		t.Fatal("wrong error class")
	}
}
