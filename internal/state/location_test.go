package state_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// A slot's move is recorded in steps, and it finishes only after its old slot reached the
// fence: a move whose fence is not reached yet stays a move, however often FinishMove runs.
func TestSlotMoveFinishesOnlyOnceItsFenceIsReached(t *testing.T) {
	dsn, pool := relaytest.MigratedDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	read := func() state.Location {
		t.Helper()
		l, err := state.ReadLocation(ctx, pool, "public", "s1")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := read(); l.Found {
		t.Fatalf("no row yet: %+v", l)
	}
	if err := state.SetLocation(ctx, conn, "public", "s1", ""); err != nil {
		t.Fatal(err)
	}
	if l := read(); !l.Found || l.Server != "" || l.Moving {
		t.Fatalf("on the primary: %+v", l)
	}
	if err := state.StartMove(ctx, conn, "public", "s1", "", "standby:5432", 0x1000); err != nil {
		t.Fatal(err)
	}
	if err := state.FinishMove(ctx, conn, "public", "s1"); err != nil { // before the fence: no effect
		t.Fatal(err)
	}
	if l := read(); !l.Moving || l.Reached || l.MoveTo != "standby:5432" || l.Fence != 0x1000 || l.Server != "" {
		t.Fatalf("moving, fence not reached: %+v", l)
	}
	if err := state.MarkReached(ctx, conn, "public", "s1"); err != nil {
		t.Fatal(err)
	}
	if l := read(); !l.Moving || !l.Reached {
		t.Fatalf("fence reached: %+v", l)
	}
	if err := state.FinishMove(ctx, conn, "public", "s1"); err != nil {
		t.Fatal(err)
	}
	if l := read(); l.Moving || l.Server != "standby:5432" {
		t.Fatalf("moved: %+v; want it on the standby, no move", l)
	}
}
