package control_test

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// A pause written is the pause read; a second pause keeps the time it
// began; every write grows the version, so a poller sees a pause and a resume that both came
// between two polls; a pipeline without a row is not paused.
func TestPauseWrittenIsThePauseRead(t *testing.T) {
	_, pool := relaytest.MigratedDB(t)
	ctx := context.Background()
	none, err := control.ReadPause(ctx, pool, "public", "orders")
	if err != nil || none.Paused || none.Version != 0 {
		t.Fatalf("no row: %+v, %v; want not paused, version 0", none, err)
	}
	first, err := control.SetPaused(ctx, pool, "public", "orders", true, "maintenance")
	if err != nil || !first.Paused || first.PausedAt == nil {
		t.Fatalf("pause: %+v, %v", first, err)
	}
	again, err := control.SetPaused(ctx, pool, "public", "orders", true, "still maintenance")
	if err != nil || !again.PausedAt.Equal(*first.PausedAt) || again.Version <= first.Version || again.Reason != "still maintenance" {
		t.Fatalf("second pause: %+v after %+v, %v; want the same paused_at, a new reason and a higher version", again, first, err)
	}
	read, err := control.ReadPause(ctx, pool, "public", "orders")
	if err != nil || read != (control.Pause{Pipeline: "orders", Paused: true, Reason: again.Reason, PausedAt: read.PausedAt, Version: again.Version}) ||
		!read.PausedAt.Equal(*first.PausedAt) {
		t.Fatalf("read: %+v, %v; want %+v", read, err, again)
	}
	resumed, err := control.SetPaused(ctx, pool, "public", "orders", false, "")
	if err != nil || resumed.Paused || resumed.PausedAt != nil || resumed.Version <= again.Version {
		t.Fatalf("resume: %+v, %v", resumed, err)
	}
}
