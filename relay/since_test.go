package relay

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/store/pgstore"
)

// peakRSS returns a process's peak resident set (VmHWM) in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

func (e *env) requestSince(req control.SinceRequest, dry bool) control.SincePlan {
	e.t.Helper()
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close(context.Background())
	plan, err := control.RequestReplaySince(context.Background(), conn, req, dry)
	if err != nil {
		e.t.Fatal(err)
	}
	return plan
}

// checkSince checks the receiver's log after a replay --since of old while later was committed
// after the request: every old event arrived again with the same X-Event-Sequence, and per
// aggregate the replayed events and then the later ones arrived in commit order (strictly rising
// X-Event-Sequence); nothing of later is lost.
func checkSince(t *testing.T, ds []relaytest.Delivery, old, later relaytest.Result) {
	t.Helper()
	isOld, isLater := map[string]bool{}, map[string]bool{}
	for _, c := range old.Committed {
		isOld[c.ID] = true
	}
	for _, c := range later.Committed {
		isLater[c.ID] = true
	}
	seen := map[string]int{}
	firstSeq := map[string]string{}
	last := map[string]string{} // per aggregate: the sequence of the last replayed or later event
	violations := 0
	for _, d := range ds {
		seen[d.ID]++
		n := seen[d.ID]
		if n == 1 {
			firstSeq[d.ID] = d.Sequence
		} else if d.Sequence != firstSeq[d.ID] {
			t.Fatalf("event %s re-sent with X-Event-Sequence %s, first sent with %s", d.ID, d.Sequence, firstSeq[d.ID])
		}
		if (isOld[d.ID] && n == 2) || (isLater[d.ID] && n == 1) {
			if d.Sequence <= last[d.Aggregate] {
				if violations++; violations <= 5 {
					t.Errorf("%s: %s (sequence %s) after %s", d.Aggregate, d.ID, d.Sequence, last[d.Aggregate])
				}
			}
			last[d.Aggregate] = d.Sequence
		}
	}
	missing := 0
	for id := range isOld {
		if seen[id] < 2 {
			missing++
		}
	}
	for id := range isLater {
		if seen[id] < 1 {
			missing++
		}
	}
	if violations > 0 || missing > 0 {
		t.Fatalf("%d order violations, %d events not (re-)delivered", violations, missing)
	}
}

// resumedAfter checks that the restarted relay resumed the replay after the rows recorded as
// sent: none of the first recorded rows, in replay order, arrived a third time.
func (e *env) resumedAfter(recorded int) {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT id::text FROM outbox_events
		ORDER BY coalesce(event_sequence, '') COLLATE "C", coalesce(insert_seq, 0), id LIMIT $1`, recorded)
	if err != nil {
		e.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatal(err)
	}
	n := map[string]int{}
	for _, d := range e.recv.Deliveries() {
		n[d.ID]++
	}
	again := 0
	for _, id := range ids {
		if n[id] > 2 {
			again++
		}
	}
	if again > 0 {
		e.t.Fatalf("%d of the %d rows recorded as replayed before the kill were replayed again: the replay restarted instead of resuming",
			again, recorded)
	}
}

// replayed reports whether every old event arrived twice and every later one once.
func (e *env) replayed(old, later relaytest.Result) bool {
	n := map[string]int{}
	for _, d := range e.recv.Deliveries() {
		n[d.ID]++
	}
	for _, c := range old.Committed {
		if n[c.ID] < 2 {
			return false
		}
	}
	for _, c := range later.Committed {
		if n[c.ID] < 1 {
			return false
		}
	}
	return true
}

// replay --since of 20k delivered events while new events are committed, with the relay
// SIGKILLed in the middle of the replay: every event arrives again with its id and sequence,
// per aggregate the replayed events come in commit order and before the new ones, the restarted
// relay resumes after the last recorded page, and the relay's RSS stays under 100 MB.
func TestReplaySinceResendsHistoryInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	addr := freeAddr(t)
	cmd := e.process("--metrics-addr", addr)
	waitFor(t, 30*time.Second, "relay streaming", func() bool { return scrape(addr, "outbox_relay_streaming") == 1 })
	var since time.Time
	if err := e.pool.QueryRow(ctx, `SELECT now()`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	old := e.produce(relaytest.Workload{Events: 20000, Aggregates: 200, MaxTxSize: 10, Writers: 4})
	requireOK(t, e.waitDelivered(old, 3*time.Minute))
	waitFor(t, time.Minute, "rows marked done", func() bool { return e.notDone() == 0 })
	_, current := e.slotLSNs()
	waitFor(t, time.Minute, "delivery confirmed", func() bool { c, _ := e.slotLSNs(); return c >= current })

	var marked time.Time // the last done-mark before the request
	if err := e.pool.QueryRow(ctx, `SELECT max(processed_at) FROM outbox_events`).Scan(&marked); err != nil {
		t.Fatal(err)
	}
	dry := e.requestSince(control.SinceRequest{Pipeline: "default", Since: since}, true)
	if dry.Events != 20000 || dry.ID != 0 || len(dry.ByType) != 1 || dry.ByType[0].Events != 20000 {
		t.Fatalf("dry run: %+v, want 20000 events of one type and no request", dry)
	}
	plan := e.requestSince(control.SinceRequest{Pipeline: "default", Since: since}, false)
	if plan.Events != 20000 {
		t.Fatalf("plan %+v, want 20000 events", plan)
	}
	produced := make(chan relaytest.Result, 1)
	go func() {
		res, err := relaytest.Produce(ctx, e.pool, relaytest.Workload{Events: 2000, Aggregates: 200, MaxTxSize: 5, Writers: 2})
		if err != nil {
			t.Error(err)
		}
		produced <- res
	}()
	// Kill the relay once a page is recorded, and start it again: it resumes.
	var sent int64
	waitFor(t, 3*time.Minute, "a replay page recorded", func() bool {
		_ = e.pool.QueryRow(ctx, `SELECT sent FROM outbox_replays WHERE id = $1`, plan.ID).Scan(&sent)
		return sent > 0
	})
	if pending := scrape(addr, "outbox_relay_replay_pending_events"); pending <= 0 || pending > float64(20000-sent) {
		t.Errorf("outbox_relay_replay_pending_events = %v with %d of 20000 sent", pending, sent)
	}
	rssBefore := peakRSS(t, cmd.Process.Pid)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	var recorded int
	if err := e.pool.QueryRow(ctx, `SELECT sent FROM outbox_replays WHERE id = $1`, plan.ID).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	cmd = e.process("--metrics-addr", addr)
	later := <-produced
	waitFor(t, 5*time.Minute, "replayed and new events delivered", func() bool { return e.replayed(old, later) })
	rss := peakRSS(t, cmd.Process.Pid)
	checkSince(t, e.recv.Deliveries(), old, later)
	e.resumedAfter(recorded)
	var state string
	var done int64
	if err := e.pool.QueryRow(ctx, `SELECT state, sent FROM outbox_replays WHERE id = $1`, plan.ID).Scan(&state, &done); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "replay recorded complete", func() bool {
		_ = e.pool.QueryRow(ctx, `SELECT state, sent FROM outbox_replays WHERE id = $1`, plan.ID).Scan(&state, &done)
		return state == "done"
	})
	if done != 20000 {
		t.Fatalf("replay recorded %d events sent, want 20000", done)
	}
	// The replay does not mark the rows again: that would rewrite the whole range and restart
	// the retention of every row in it.
	ids := make([]string, len(old.Committed))
	for i, c := range old.Committed {
		ids[i] = c.ID
	}
	var remarked int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE id = ANY($1::uuid[]) AND processed_at > $2`,
		ids, marked).Scan(&remarked); err != nil {
		t.Fatal(err)
	}
	if remarked != 0 {
		t.Fatalf("%d of the 20000 replayed rows were marked done again", remarked)
	}
	t.Logf("killed after %d of 20000 replayed; peak RSS %d MB before the kill, %d MB after the restart; %d deliveries",
		sent, rssBefore>>20, rss>>20, len(e.recv.Deliveries()))
	if max(rss, rssBefore) > 100<<20 {
		t.Fatalf("relay peak RSS %d MB, want under 100 MB", max(rss, rssBefore)>>20)
	}
}

// After a restart, a resent transaction holding a replay request (an event without id) is
// checked against the done marks like any other: the request does not make the check fail, which
// would send every event of the batch again.
func TestDeliveredCheckIgnoresReplayRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	var id string
	if err := e.pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status)
		VALUES ('order', '1', 'order.paid', '{}', 'done') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	m := pgstore.NewMarker(e.pool, pgstore.MarkerConfig{})
	seen, err := m.Delivered(ctx, []string{id, ""})
	if err != nil || !seen[id] || len(seen) != 1 {
		t.Fatalf("Delivered = %v, %v; want only %s", seen, err, id)
	}
}

// A replay requested while the relay is still delivering what came before it re-sends that too:
// it waits until everything queued ahead is delivered and marked, so the rows it reads include
// them, and re-sends them in order.
func TestReplaySinceIncludesWhatWasQueuedAhead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.start(nil)
	e.recv.Hang() // nothing is delivered before the request
	var since time.Time
	if err := e.pool.QueryRow(context.Background(), `SELECT now()`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	res := e.produce(relaytest.Workload{Events: 2000, Aggregates: 20, MaxTxSize: 10})
	plan := e.requestSince(control.SinceRequest{Pipeline: "default", Since: since}, false)
	if plan.Pending != int64(len(res.Committed)) {
		t.Fatalf("%d of %d events pending at the request, want all", plan.Pending, len(res.Committed))
	}
	e.recv.Unhang()
	waitFor(t, time.Minute, "every event sent twice", func() bool { return e.replayed(res, relaytest.Result{}) })
	checkSince(t, e.recv.Deliveries(), res, relaytest.Result{})
	t.Logf("%d of %d events pending when the replay was requested", plan.Pending, len(res.Committed))
}
