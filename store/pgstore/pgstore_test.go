package pgstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/store"
	"github.com/outbox-relay/outbox-relay/store/pgstore"
	"github.com/outbox-relay/outbox-relay/store/storetest"
)

// The PostgreSQL stores pass the conformance suite memstore passes, on a real cluster: each
// case in a database of its own.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: newDB})
}

func newDB(t *testing.T) storetest.DB {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	marker := pgstore.NewMarker(pool, pgstore.MarkerConfig{Interval: 5 * time.Millisecond})
	dlog := pgstore.NewDeliveryLog(pool, pgstore.DeliveryLogConfig{Interval: 5 * time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = marker.Run(runCtx) }()
	go func() { defer wg.Done(); _ = dlog.Run(runCtx) }()
	t.Cleanup(func() { stop(); wg.Wait() })
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	return storetest.DB{
		Pipeline: func(name string, own bool) store.Pipeline {
			return pgstore.Pipeline{Pool: pool, Pipeline: name, OwnState: own}
		},
		Backlog:   func(p string) store.Backlog { return pgstore.Backlog{Pool: pool, Pipeline: p} },
		Endpoints: func(p string) store.Endpoints { return pgstore.Endpoints{Pool: pool, Pipeline: p} },
		Marks:     marker,
		Log:       dlog,
		History:   dlog,
		Insert: func(ms ...*envelope.Message) {
			for _, m := range ms {
				exec(`INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, created_at, tenant_id)
					VALUES ($1, $2, $3, $4, $5, $6, nullif($7, ''))`, m.ID, m.AggregateType, m.AggregateID, m.EventType,
					string(m.Payload), m.CreatedAt, m.TenantID)
			}
		},
		Delete: func(ids ...string) { exec(`DELETE FROM outbox_events WHERE id = ANY($1::uuid[])`, ids) },
		PutEndpoint: func(id, tenant string) {
			exec(`INSERT INTO outbox_endpoints (id, url, secrets, tenant_id)
				VALUES ($1, 'https://example.com/'||$1, '[{"secret": "0123456789abcdef"}]', nullif($2, ''))`, id, tenant)
		},
		Backfill: func(slot string, ids ...string) {
			for i, id := range ids {
				exec(`INSERT INTO outbox_backfill (slot, position, event_id) VALUES ($1, $2, $3)`, slot, i+1, id)
			}
		},
		RequestSince: func(st store.SinceState) int64 {
			id, err := state.RecordReplay(ctx, pool, "", st.Pipeline, state.ReplayRange{Since: st.Since, Until: st.Until,
				AggregateType: st.AggregateType, EventType: st.EventType}, st.Total)
			if err != nil {
				t.Fatal(err)
			}
			return id
		},
		Flush: func() {
			deadline := time.Now().Add(30 * time.Second)
			for !marker.Flushed() || !dlog.Flushed() {
				if time.Now().After(deadline) {
					t.Fatal("the marks and the delivery log were not written within 30s")
				}
				time.Sleep(5 * time.Millisecond)
			}
		},
		Deliveries: func(id string) (delivered, failed []store.DeliveryAttempt) {
			recs, _, err := state.EventDeliveries(ctx, pool, "", id)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				a := store.DeliveryAttempt{Pipeline: r.Pipeline, Endpoint: r.Endpoint, EventID: r.EventID, Attempt: r.Attempt,
					At: r.At, Status: r.Status, Latency: time.Duration(r.LatencyMS) * time.Millisecond, Error: r.Error}
				if r.Delivered {
					delivered = append(delivered, a)
				} else {
					failed = append(failed, a)
				}
			}
			return delivered, failed
		},
	}
}
