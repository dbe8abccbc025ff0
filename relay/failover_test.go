package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// PostgreSQL 17 failover slots: a primary and a physical standby set up for slot
// synchronisation; the relay streams under load through a DSN listing both hosts with
// target_session_attrs=read-write; the primary is SIGKILLed and the standby promoted. The relay
// continues on the new primary from the synced slot, without a backfill: every row the new
// primary has is delivered, nothing it lacks is (the primary only sends what the standby has,
// synchronized_standby_slots), and first deliveries keep per-aggregate order.
func TestFailoverSlotContinuesOnPromotedStandby(t *testing.T) {
	t.Parallel()
	requireVersion(t, cdc.SlotFailoverVersion, "failover slots")
	ctx := context.Background()
	primary, standby, db := primaryWithStandby(t,
		map[string]string{"synchronized_standby_slots": "standby1"},
		map[string]string{"sync_replication_slots": "on"})
	// Both hosts, as an operator lists them (the test clusters listen on their socket directories).
	dsn := fmt.Sprintf("host=%s,%s port=%d,%d user=postgres dbname=%s sslmode=disable target_session_attrs=read-write",
		primary.SocketDir(), standby.SocketDir(), primary.Port, standby.Port, db)
	pool := clusterPool(t, dsn)
	standbyPool := clusterPool(t, standby.DSN(db))
	recv := relaytest.NewReceiver(secret)
	t.Cleanup(recv.Close)
	e := &env{t: t, dsn: dsn, pool: pool, recv: recv, slot: fmt.Sprintf("slot_%d", rand.Uint32())}
	r := e.start(nil) // --failover left at auto: on for 17
	waitFor(t, 30*time.Second, "the relay's slot made a failover slot (auto on 17)", func() bool {
		var failover bool
		_ = pool.QueryRow(ctx, "SELECT failover FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&failover)
		return failover
	})

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	written := loadWriters(loadCtx, pool, 4, 10, 20*time.Millisecond)
	// The slot must be synced and persistent on the standby before a promotion can keep it;
	// the sync worker backs off up to 30 s between rounds.
	waitFor(t, 2*time.Minute, "slot synced to the standby and persistent, 300 deliveries", func() bool {
		var ready bool
		_ = standbyPool.QueryRow(ctx, `SELECT synced AND NOT temporary AND invalidation_reason IS NULL
			FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&ready)
		return ready && recv.Unique() >= 300
	})
	before := recv.Unique()
	if err := primary.SigKill(); err != nil {
		t.Fatal(err)
	}
	n := written() // the writers stop at their first failed write
	t.Logf("primary SIGKILLed under load after %d committed writes (%d delivered)", n, before)
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	// The relay must reach the new primary by itself; write more there and wait for it all.
	continueWriting(t, standbyPool, 300)
	rep := waitAllDelivered(t, standbyPool, recv, 3*time.Minute)
	requireOK(t, rep)
	if rep.Committed < n-10 || rep.Delivered <= before {
		t.Fatalf("report %s: the new primary should have about the %d writes, and deliveries should grow past %d",
			rep, n, before)
	}
	var synced bool
	if err := standbyPool.QueryRow(ctx, "SELECT synced FROM pg_replication_slots WHERE slot_name = $1 AND active",
		e.slot).Scan(&synced); err != nil {
		t.Fatalf("the relay does not stream the synced slot on the new primary: %v", err)
	}
	select {
	case err := <-r.done:
		t.Fatalf("relay stopped during the failover: %v", err)
	default:
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// With --failover=false on 17 the relay turns the option off on an existing failover slot, and
// with auto it turns it on again, waiting while another process holds the slot.
func TestFailoverOptionIsAppliedToAnExistingSlot(t *testing.T) {
	t.Parallel()
	requireVersion(t, cdc.SlotFailoverVersion, "failover slots")
	e := newEnv(t)
	ctx := context.Background()
	failover := func() bool {
		var on bool
		if err := e.pool.QueryRow(ctx, "SELECT failover FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&on); err != nil {
			t.Fatal(err)
		}
		return on
	}
	r := e.start(func(c *Config) { c.Failover = cdc.FailoverOff })
	if failover() {
		t.Fatal("--failover=false created a failover slot")
	}
	// The first relay still streams from the slot: the second must wait for it, then alter.
	logs := &relaytest.SyncBuffer{}
	second := e.startNoWait(func(c *Config) { c.Logger = c.Logger.Output(logs).Level(-1) })
	waitFor(t, 30*time.Second, "second relay waiting for the held slot", func() bool {
		return strings.Contains(logs.String(), "waiting to set its failover option")
	})
	if failover() {
		t.Fatal("failover changed while another process held the slot")
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "failover on once the slot is free", failover)
	res := e.produce(relaytest.Workload{Events: 50, Aggregates: 5})
	requireOK(t, e.waitDelivered(res, time.Minute))
	if err := second.stop(t); err != nil {
		t.Fatal(err)
	}
}

// startNoWait starts a relay like start, without waiting for its slot (which may be on another
// server); wait for streaming with r.streaming.
func (e *env) startNoWait(mutate func(*Config)) *running {
	e.t.Helper()
	cfg := e.config()
	if mutate != nil {
		mutate(&cfg)
	}
	cfg = flagFieldsCleared(cfg)
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1), reg: reg}
	go func() { r.done <- Run(ctx, cfg) }()
	e.t.Cleanup(func() { r.stop(e.t) })
	return r
}

// streaming reports whether the relay holds its slot and streams (the streaming gauge).
func (r *running) streaming(t *testing.T) func() bool {
	return func() bool { return r.metric(t, "outbox_relay_streaming") == 1 }
}

// --failover=true on a server without failover slots stops the relay with an error that says
// so, instead of running without the protection that was asked for.
func TestFailoverTrueBefore17IsAnError(t *testing.T) {
	t.Parallel()
	var num int
	if err := pgxConnRow(t, "SELECT current_setting('server_version_num')::int", &num); err != nil {
		t.Fatal(err)
	}
	if num >= cdc.SlotFailoverVersion {
		t.Skipf("this server (%d) has failover slots; TestFailoverSlotContinuesOnPromotedStandby covers it", num)
	}
	e := newEnv(t)
	cfg := e.config()
	cfg.Failover = cdc.FailoverOn
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := Run(ctx, cfg)
	// The library names the option; the CLI adds its flag (cmd/outbox-relay's explain).
	if !errors.Is(err, cdc.ErrFailoverUnsupported) || !strings.Contains(err.Error(), "turn the failover option off") {
		t.Fatalf("Run with failover on, on %d: %v; want ErrFailoverUnsupported saying to turn the option off", num, err)
	}
}
