package memstore_test

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/store"
	"github.com/outbox-relay/outbox-relay/store/memstore"
	"github.com/outbox-relay/outbox-relay/store/storetest"
)

// The in-memory twin passes the conformance suite pgstore passes on PostgreSQL.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: func(*testing.T) storetest.DB {
		db := memstore.New(nil)
		return storetest.DB{
			Pipeline:  db.Pipeline,
			Backlog:   db.Backlog,
			Endpoints: db.Endpoints,
			Marks:     db.Marks(),
			Log:       db.DeliveryLog(),
			History:   db.DeliveryHistory(),
			Insert:    func(ms ...*envelope.Message) { db.Insert(ms...) },
			Delete:    db.Delete,
			PutEndpoint: func(id, tenant string) {
				db.PutEndpoint(id, []byte(`{"id": "`+id+`", "tenant_id": "`+tenant+`"}`))
			},
			Backfill:     db.Backfill,
			RequestSince: func(st store.SinceState) int64 { return db.RequestSince(st) },
			Flush:        func() {},
			Deliveries:   db.Deliveries,
		}
	}})
}
