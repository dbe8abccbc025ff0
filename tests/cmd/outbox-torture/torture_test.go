package main

import (
	"bytes"
	"context"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestMain shares one cluster among the writer tests; the torture run starts its own, since it
// restarts it.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

// TestTortureShort runs a short torture with every fault kind at least once, so `make test`
// keeps the harness and the relay's guarantees under it working. TORTURE_SEED replays a
// schedule; otherwise the seed is random and logged.
func TestTortureShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the relay and runs it under faults for 35s: skipped with -short")
	}
	pgtest.Long(t)
	cfg := defaultConfig()
	cfg.Events, cfg.Duration, cfg.Drain = 1500, 35*time.Second, time.Minute
	// Every kind runs once, shuffled, before any repeats: short gaps fit all twelve in the run,
	// with time to spare for the slow ones (a failover, a restart, a 4–6s partition, a pause) on a
	// loaded machine.
	cfg.GapMin, cfg.GapMax = 300*time.Millisecond, 700*time.Millisecond
	cfg.Seed = randomSeed()
	if v := os.Getenv("TORTURE_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TORTURE_SEED=%q", v)
		}
		cfg.Seed = seed
	}
	t.Logf("seed %d (TORTURE_SEED=%d go test -run TestTortureShort ./cmd/outbox-torture replays it)", cfg.Seed, cfg.Seed)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress relaytest.SyncBuffer
	res, err := torture(ctx, cfg, &progress)
	if err != nil {
		t.Fatalf("torture: %v\nprogress:\n%s", err, progress.String())
	}
	var summary bytes.Buffer
	writeSummary(&summary, res)
	defer func() {
		if t.Failed() {
			t.Logf("summary:\n%s\nprogress:\n%s", summary.String(), progress.String())
		}
	}()
	if !res.OK() {
		t.Fatalf("invariants failed (seed %d); relay and server logs kept in %s", cfg.Seed, res.LogDir)
	}
	for k := faultKind(0); k < faultKinds; k++ {
		if res.Faults.Counts[k] == 0 {
			t.Errorf("fault %s never ran", k)
		}
	}
	if len(res.Faults.Takeovers) == 0 {
		t.Errorf("no standby took over")
	}
	if res.Verdict.Committed < cfg.Events/2 {
		t.Errorf("only %d of %d events committed: the writers did not get through the faults", res.Verdict.Committed, cfg.Events)
	}
	if res.Verdict.Samples < 50 {
		t.Errorf("only %d samples of the slot: the confirm check saw too little", res.Verdict.Samples)
	}
	for _, want := range []string{"| lost | 0 | ok |", "| order violations | 0 | ok |", "| result | **PASS** |"} {
		if !strings.Contains(summary.String(), want) {
			t.Errorf("summary has no line %q", want)
		}
	}
}

// TestTortureTwoPipelines runs the relays with a two-pipeline --config (TORTURE_PIPELINES=2)
// under the same faults: the first pipeline passes every check of the one-pipeline run, and the
// filtered second one loses nothing, delivers nothing its filter refuses, and keeps order.
func TestTortureTwoPipelines(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the relay and runs it under faults for 20s: skipped with -short")
	}
	pgtest.Long(t)
	cfg := defaultConfig()
	cfg.Pipelines = 2
	cfg.Events, cfg.Duration, cfg.Drain = 800, 20*time.Second, time.Minute
	cfg.GapMin, cfg.GapMax = 300*time.Millisecond, 700*time.Millisecond
	cfg.Seed = randomSeed()
	t.Logf("seed %d", cfg.Seed)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress relaytest.SyncBuffer
	res, err := torture(ctx, cfg, &progress)
	if err != nil {
		t.Fatalf("torture: %v\nprogress:\n%s", err, progress.String())
	}
	var summary bytes.Buffer
	writeSummary(&summary, res)
	if !res.OK() || res.Second == nil || res.Second.Expected == 0 {
		t.Fatalf("two pipelines under faults (seed %d): second %+v\nsummary:\n%s\nprogress:\n%s", cfg.Seed, res.Second,
			summary.String(), progress.String())
	}
	t.Logf("second pipeline: %d of %d delivered", res.Second.Delivered, res.Second.Expected)
}

// TestTortureEndpointsShort runs the relays with --endpoints (TORTURE_ENDPOINTS=1) under the
// same faults (but a replay since a time and a dropped slot, see endpointsSkip), while 50
// endpoints over 20 tenants are added, updated, paused, resumed, disabled, enabled and removed:
// nothing lost to an endpoint subscribed at commit, nothing delivered outside rule 4, order per
// (endpoint, aggregate), and the slot never confirmed past an undelivered pair.
func TestTortureEndpointsShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the relay and runs it under faults for 25s: skipped with -short")
	}
	pgtest.Long(t)
	cfg := defaultConfig()
	cfg.Endpoints = true
	cfg.Events, cfg.Duration, cfg.Drain = 1200, 25*time.Second, time.Minute
	cfg.Relay = os.Getenv("TORTURE_RELAY") // a relay binary to check instead of this tree's
	cfg.GapMin, cfg.GapMax = 300*time.Millisecond, 700*time.Millisecond
	cfg.Seed = randomSeed()
	if v := os.Getenv("TORTURE_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TORTURE_SEED=%q", v)
		}
		cfg.Seed = seed
	}
	t.Logf("seed %d (TORTURE_SEED=%d go test -run TestTortureEndpointsShort ./cmd/outbox-torture replays it)", cfg.Seed, cfg.Seed)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var progress relaytest.SyncBuffer
	res, err := torture(ctx, cfg, &progress)
	if err != nil {
		t.Fatalf("torture: %v\nprogress:\n%s", err, progress.String())
	}
	var summary bytes.Buffer
	writeSummary(&summary, res)
	defer func() {
		if t.Failed() {
			t.Logf("summary:\n%s\nprogress:\n%s", summary.String(), progress.String())
		}
	}()
	if !res.OK() {
		t.Fatalf("invariants failed (seed %d); relay and server logs kept in %s", cfg.Seed, res.LogDir)
	}
	v := res.Endpoints
	if v == nil {
		t.Fatal("no endpoints verdict")
	}
	skipped := map[faultKind]bool{}
	for _, k := range endpointsSkip {
		skipped[k] = true
	}
	for k := faultKind(0); k < faultKinds; k++ {
		if !skipped[k] && res.Faults.Counts[k] == 0 {
			t.Errorf("fault %s never ran", k)
		}
	}
	for _, op := range epOps {
		if res.Changes.Committed[op] == 0 {
			t.Errorf("no endpoint %s committed during the run", op)
		}
	}
	// The run must have met each thing it checks: pairs rule 4 refuses for each reason but the
	// rarest (paused, then dropped), pairs held by a pause and delivered after the resume.
	for _, why := range whys {
		if why != whyPausedDropped && v.NotRouted[why] == 0 {
			t.Errorf("no pair %s: that rule went unchecked", why)
		}
	}
	if v.PausedDelivered == 0 || v.Delivered < v.Committed/4 { // about one pair in two events
		t.Errorf("%d pairs routed while paused delivered, %d required pairs delivered of %d events", v.PausedDelivered,
			v.Delivered, v.Committed)
	}
	if v.Samples < 50 {
		t.Errorf("only %d samples of the slot: the confirm check saw too little", v.Samples)
	}
	t.Logf("%d blackouts; the relays logged %d spills to a backlog and %d catch-ups", res.Blackouts, res.Spills, res.Rejoins)
	t.Logf("outbox_events once drained: %d rows left pending, %d more pending after a kill (advisory marks)", res.Pending,
		res.PendingAfterKill)
	if res.Spills == 0 || res.Rejoins == 0 {
		t.Errorf("%d spills and %d catch-ups: the backlog went unchecked", res.Spills, res.Rejoins)
	}
	for _, want := range []string{"| lost | 0 of ", "| deliveries outside rule 4 | 0 not routed", "| order violations | 0 per",
		"| result | **PASS** |"} {
		if !strings.Contains(summary.String(), want) {
			t.Errorf("summary has no line %q", want)
		}
	}
}
