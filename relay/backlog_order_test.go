package relay

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// A relay that starts with an endpoint's backlog written by another relay reads it no further
// than its own stream has come. The other relay spilled the endpoint while an attempt of e1 was
// under way, wrote the later e2 to the backlog, and died before e1's attempt settled: e1 is
// neither delivered nor in the backlog, and the slot is before it. The new relay must send e1
// (from the stream, through the backlog) before e2, not deliver e2 at once and leave e1 behind
// it. CI's torture run found this (seed 3724974251207849: order and confirm violations after a
// failover); here another endpoint's backlog of filler holds the stream for the second the new
// relay needs to spill it, so the backlog is read long before e1 comes again.
func TestBacklogFromAnotherRelayWaitsForTheStream(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ordered := newPartner(t, "ordered", func(_, aggType, _ string) bool { return aggType == "order" })
	filler := newPartner(t, "filler", func(_, aggType, _ string) bool { return aggType == "filler" })
	e.addPartner(ordered, outbox.Endpoint{AggregateTypes: []string{"order"}})
	e.addPartner(filler, outbox.Endpoint{AggregateTypes: []string{"filler"}})
	var orderedFails atomic.Bool
	orderedFails.Store(true)
	ordered.recv.SetFail(func(*http.Request) int {
		if orderedFails.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	filler.recv.SetFail(func(*http.Request) int { return http.StatusServiceUnavailable })

	// The first relay: nothing spills, so nothing is confirmed past the filler.
	r := e.start(func(c *Config) { endpointsConfig(c); c.SpillAfter, c.SpillSize = time.Hour, 1<<30 })
	peek := fmt.Sprintf("peek_%d", rand.Uint32())
	if _, err := e.pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, peek); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, peek) })
	for range 5 { // 10,000 filler events, more than the relay buffers (8,192)
		if _, err := e.pool.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
			SELECT 'filler', (g % 100)::text, 'filler.made', '{}' FROM generate_series(1, 2000) g`); err != nil {
			t.Fatal(err)
		}
	}
	e.write("a", tenantEvents{"", "order", "order.created", 1, 2}, []*partner{ordered}) // e1, e2: one transaction each
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// The commit LSNs of e1 and e2, the last two transactions: the begin messages carry them.
	rows, err := e.pool.Query(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2) WHERE get_byte(data, 0) = ascii('B')`, peek, "pub_"+e.slot)
	if err != nil {
		t.Fatal(err)
	}
	var commits []pglogrepl.LSN
	for rows.Next() {
		var d []byte
		if err := rows.Scan(&d); err != nil {
			t.Fatal(err)
		}
		commits = append(commits, pglogrepl.LSN(binary.BigEndian.Uint64(d[1:9])))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(commits) < 2 {
		t.Fatalf("peeked %d transactions, want the filler's and e1's and e2's", len(commits))
	}
	e1, e2 := ordered.want.Committed[0], ordered.want.Committed[1]
	p2 := commits[len(commits)-1]
	if confirmed, _ := e.slotLSNs(); confirmed >= int64(commits[len(commits)-2]) {
		t.Fatalf("set-up: the slot confirmed %d, past e1's commit %s", confirmed, commits[len(commits)-2])
	}
	// What the other relay left: e2 in the backlog, e1 not (its attempt was under way).
	if err := state.SpillBacklog(ctx, e.pool, "", DefaultPipeline, ordered.id,
		[]state.BacklogEntry{{LSN: p2, Idx: 0, EventID: e2.ID, Mark: true}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("e1 %s, e2 %s at %s in the backlog", e1.ID, e2.ID, p2)

	orderedFails.Store(false)
	r = e.start(func(c *Config) { endpointsConfig(c); c.SpillAfter = time.Second })
	defer func() { _ = r.stop(t) }()
	waitPartners(t, ordered) // both, e1 first
	waitFor(t, 30*time.Second, "the ordered endpoint's backlog emptied", func() bool { return e.backlogCount(ordered.id) == 0 })
}
