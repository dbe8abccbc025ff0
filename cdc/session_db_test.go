package cdc_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// A stream reports the session that holds the slot (0 before it streams and after it stops)
// and where the slot's confirmed position stood as that session started: the engine drops what
// it held from an earlier session that another relay confirmed past meanwhile.
func TestStreamReportsItsSessionAndWhereTheSlotStood(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, pool := relaytest.MigratedDB(t)
	if _, err := cdc.Setup(ctx, dsn, "s_sess", "p_sess", cdc.SetupOptions{NoBackfill: true}); err != nil {
		t.Fatal(err)
	}
	// Another relay confirmed past a transaction: the slot's position moves on.
	run(t, pool, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '1', 'e1', '{}')`)
	var moved string
	if err := pool.QueryRow(ctx, `SELECT end_lsn::text FROM pg_replication_slot_advance('s_sess', pg_current_wal_lsn())`).Scan(&moved); err != nil {
		t.Fatal(err)
	}
	want, err := pglogrepl.ParseLSN(moved)
	if err != nil || want == 0 {
		t.Fatalf("slot advanced to %q: %v", moved, err)
	}
	stream := cdc.NewStream(cdc.Config{DSN: dsn, Slot: "s_sess", Publication: "p_sess"}, cdc.NewTracker(1000, 1<<20))
	if s := stream.Session(); s != 0 {
		t.Fatalf("session %d before the stream runs", s)
	}
	runCtx, stop := context.WithCancel(ctx)
	drained := make(chan struct{})
	close(drained)
	var g errgroup.Group
	g.Go(func() error { return stream.Run(runCtx, make(chan *cdc.Tx, 8), drained) })
	for stream.Session() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the stream never held the slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s, from := stream.Session(), stream.SessionFrom(); s != 1 || from != want {
		t.Errorf("session %d from %s; want 1 from %s, where the slot stood", s, from, want)
	}
	stop()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if s := stream.Session(); s != 0 {
		t.Errorf("session %d after the stream stopped", s)
	}
}
