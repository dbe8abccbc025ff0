package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// pauseGrace is how long attempts under way when the pause took effect may still finish: the
// relays' --request-timeout (1s) bounds each, hung ones included, and a little more for the
// receiver to record the last. After it, a paused pipeline delivers nothing.
const pauseGrace = 1500 * time.Millisecond

// pause pauses the pipeline through the database for pauseGrace + hold, while the writers go
// on, and resumes it. The leader must report the pause within takeoverLimit and, once the
// attempts under way have had pauseGrace to finish, deliver nothing for hold; the final checks
// then find everything delivered, in order.
func (t *harness) pause(ctx context.Context, hold time.Duration) {
	if err := t.setPaused(ctx, true); err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("pause: %v", err))
		return
	}
	defer func() {
		if err := t.setPaused(context.WithoutCancel(ctx), false); err != nil {
			t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("resume: %v", err))
		}
	}()
	if !t.waitPaused(ctx, 1) {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("pause: no leader reported it within %s", takeoverLimit))
		return
	}
	if !sleep(ctx, pauseGrace) {
		return
	}
	before := t.recv.mark()
	if !sleep(ctx, hold) {
		return
	}
	if after := t.recv.mark(); before >= 0 && after > before {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("pause: %d deliveries in %s while paused (after %s for attempts under way)",
			after-before, hold.Round(time.Millisecond), pauseGrace))
	}
}

func (t *harness) setPaused(ctx context.Context, paused bool) error {
	conn, err := pgx.Connect(ctx, t.outDSN)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = control.SetPaused(ctx, conn, "", publisher.DefaultPipeline, paused, "torture pause fault")
	return err
}

// waitPaused waits until the leader's outbox_relay_pipeline_paused is want.
func (t *harness) waitPaused(ctx context.Context, want float64) bool {
	deadline := time.Now().Add(takeoverLimit)
	for time.Now().Before(deadline) {
		if p := t.fleet.leader(ctx); p != nil && gauge(ctx, p.addr, "outbox_relay_pipeline_paused") == want {
			return true
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return false
		}
	}
	return false
}

// gauge reads an unlabelled series from a relay's /metrics; -1 if it cannot.
func gauge(ctx context.Context, addr, name string) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return -1
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		// The series carry the pipeline label; the torture relay runs the default pipeline.
		line := strings.Replace(sc.Text(), `{pipeline="default"}`, "", 1)
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return -1
}

// replaySinceLimit bounds how long a replay of the last few seconds may take under faults.
const replaySinceLimit = time.Minute

// replaySince asks for everything created in the last back to be sent again, while the writers go
// on, and waits until the relay has recorded it complete. Replayed events arrive twice with the
// same id and X-Event-Sequence: the checks count them as duplicates, which neither the order
// check (first appearances) nor the consumer's inbox (it deduplicates by id) is affected by.
func (t *harness) replaySince(ctx context.Context, back time.Duration) {
	conn, err := pgx.Connect(ctx, t.outDSN)
	if err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("replay-since: %v", err))
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var now time.Time
	if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("replay-since: %v", err))
		return
	}
	plan, err := control.RequestReplaySince(ctx, conn,
		control.SinceRequest{Pipeline: publisher.DefaultPipeline, Since: now.Add(-back)}, false)
	if err != nil {
		t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("replay-since: %v", err))
		return
	}
	t.logf("replay since %s ago: %d events (request %d)", back.Round(time.Millisecond), plan.Events, plan.ID)
	if plan.ID == 0 {
		return
	}
	deadline := time.Now().Add(replaySinceLimit)
	for ctx.Err() == nil {
		var state string
		err := conn.QueryRow(ctx, `SELECT state FROM outbox_replays WHERE id = $1`, plan.ID).Scan(&state)
		if err == nil && state == "done" {
			t.faults.Replays = append(t.faults.Replays, plan.Events)
			return
		}
		if time.Now().After(deadline) {
			t.faults.Failures = append(t.faults.Failures, fmt.Sprintf("replay-since: request %d of %d events not done after %s (state %q)",
				plan.ID, plan.Events, replaySinceLimit, state))
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
}
