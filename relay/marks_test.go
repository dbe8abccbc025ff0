package relay

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// Issue: done-marks refused by the database were retried every 50ms and logged each time (180
// lines in 9s). They back off, log once per distinct error per minute, are counted, and
// delivery goes on; once the privilege is back, the rows are marked.
func TestFailingDoneMarksBackOffAndAreCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	role := fmt.Sprintf("rw_%d", rand.Uint32())
	cfg := e.config()
	cfg.DSN = e.relayRole(role)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, fmt.Sprintf(`GRANT SELECT, UPDATE ON outbox_events TO %[1]s;
		GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_parked_aggregates TO %[1]s;
		GRANT SELECT, INSERT, DELETE ON outbox_backfill TO %[1]s; GRANT SELECT, INSERT, UPDATE ON outbox_slots TO %[1]s;
		GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_pipeline_events TO %[1]s;
		GRANT SELECT, INSERT, UPDATE ON outbox_pipeline_control TO %[1]s; GRANT SELECT, UPDATE ON outbox_replays TO %[1]s; GRANT SELECT, UPDATE ON outbox_reshard TO %[1]s;
		GRANT SELECT, INSERT, UPDATE ON outbox_slot_location TO %[1]s`, role)); err != nil {
		t.Fatal(err)
	}
	var logs relaytest.SyncBuffer
	cfg.Logger = zerolog.New(io.MultiWriter(&logs, zerolog.NewTestWriter(t))).Level(zerolog.WarnLevel)
	r := e.startWith(cfg)
	first := e.produce(relaytest.Workload{Events: 5, Aggregates: 1, MaxTxSize: 1})
	requireOK(t, e.waitDelivered(first, 30*time.Second))
	waitFor(t, 30*time.Second, "rows marked done while UPDATE is granted", func() bool { return e.notDone() == 0 })

	if _, err := e.pool.Exec(ctx, "REVOKE UPDATE ON outbox_events FROM "+role); err != nil {
		t.Fatal(err)
	}
	res := e.produce(relaytest.Workload{Events: 20, Aggregates: 4, MaxTxSize: 2, Type: "invoice"})
	res.Committed = append(first.Committed, res.Committed...)
	requireOK(t, e.waitDelivered(res, 30*time.Second)) // delivery continues
	waitFor(t, 60*time.Second, "five failed mark batches counted", func() bool {
		return r.metric(t, "outbox_relay_status_mark_errors_total") >= 5
	})
	if n := strings.Count(logs.String(), "marking delivered rows done failed"); n > 2 {
		t.Fatalf("%d log lines for one persisting error; want it logged once a minute", n)
	}
	if _, err := e.pool.Exec(ctx, "GRANT UPDATE ON outbox_events TO "+role); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "rows marked done once UPDATE is granted again", func() bool { return e.notDone() == 0 })
}

func (e *env) notDone() int {
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events WHERE status <> 'done'`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}
