package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// PostgreSQL 16 decodes on a hot standby: with --replication-dsn naming the standby, the slot
// lives and is decoded there, while the publication, the done-marks and replays stay on the
// primary. Everything is delivered in order and every row ends marked done on the primary.
func TestStandbyDecodingDeliversAndMarksOnPrimary(t *testing.T) {
	t.Parallel()
	requireVersion(t, cdc.StandbyDecodingVersion, "logical decoding on a standby")
	ctx := context.Background()
	primary, standby, db := primaryWithStandby(t, nil, nil)
	pool := clusterPool(t, primary.DSN(db))
	standbyPool := clusterPool(t, standby.DSN(db))
	recv := relaytest.NewReceiver(secret)
	t.Cleanup(recv.Close)
	e := &env{t: t, dsn: primary.DSN(db), pool: pool, recv: recv, slot: fmt.Sprintf("slot_%d", rand.Uint32())}
	r := e.startNoWait(func(c *Config) { c.ReplicationDSN, c.NoBackfill = standby.DSN(db), true })
	// The slot is on the standby, streamed from there, and not on the primary.
	waitFor(t, time.Minute, "relay streaming", r.streaming(t))
	var active bool
	if err := standbyPool.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&active); err != nil || !active {
		t.Fatalf("slot active on the standby = %v (%v), want true", active, err)
	}
	var onPrimary int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&onPrimary); err != nil {
		t.Fatal(err)
	}
	if onPrimary != 0 {
		t.Fatal("the slot was created on the primary, not on the --replication-dsn standby")
	}
	res := e.produce(relaytest.Workload{Events: 2000, Aggregates: 40, MaxTxSize: 10, Rollback: 0.05, Writers: 4})
	requireOK(t, e.waitDelivered(res, 2*time.Minute))
	// Marks land on the primary (a standby is read-only, so they can only be there).
	waitFor(t, time.Minute, "every row marked done on the primary", func() bool {
		var notDone int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM outbox_events WHERE status <> 'done'").Scan(&notDone)
		return notDone == 0
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// Without --replication-dsn the stream never decodes on a server in recovery: pointed at the
// standby, it keeps retrying and never streams. The positive control, the same stream allowed
// onto the standby, streams at once.
func TestStreamRefusesAStandbyUnlessAllowed(t *testing.T) {
	t.Parallel()
	requireVersion(t, cdc.StandbyDecodingVersion, "logical decoding on a standby")
	ctx := context.Background()
	primary, standby, db := primaryWithStandby(t, nil, nil)
	slot := "probe"
	// Create the slot on the standby (a relay with --replication-dsn does this), then stop it.
	e := &env{t: t, dsn: primary.DSN(db), pool: clusterPool(t, primary.DSN(db)), recv: relaytest.NewReceiver(secret), slot: slot}
	t.Cleanup(e.recv.Close)
	r := e.startNoWait(func(c *Config) { c.ReplicationDSN, c.NoBackfill = standby.DSN(db), true })
	standbyPool := clusterPool(t, standby.DSN(db))
	waitFor(t, time.Minute, "relay streaming from the standby", r.streaming(t))
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	run := func(allow bool) (*cdc.Stream, *relaytest.SyncBuffer, func()) {
		logs := &relaytest.SyncBuffer{}
		s := cdc.NewStream(cdc.Config{DSN: standby.DSN(db), Slot: slot, Publication: "pub_" + slot, AllowStandby: allow,
			ReconnectMax: 200 * time.Millisecond, Logger: zerolog.New(logs)}, cdc.NewTracker(100, 1<<20))
		sctx, cancel := context.WithCancel(ctx)
		txs := make(chan *cdc.Tx, 16)
		drained := make(chan struct{})
		close(drained)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.Run(sctx, txs, drained) }()
		return s, logs, func() { cancel(); wg.Wait() }
	}
	s, logs, stop := run(false)
	waitFor(t, 30*time.Second, "three refused attempts on the standby", func() bool {
		return strings.Count(logs.String(), "reached a standby") >= 3
	})
	if s.Streaming() {
		t.Fatal("the stream streams on a standby without AllowStandby")
	}
	var active bool
	_ = standbyPool.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
	stop()
	if active {
		t.Fatal("the slot on the standby became active without AllowStandby")
	}
	s, _, stop = run(true)
	defer stop()
	waitFor(t, 30*time.Second, "streaming on the standby with AllowStandby", s.Streaming)
}
