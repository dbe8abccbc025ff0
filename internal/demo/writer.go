package demo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// placeOrder is the producer: one statement, so one transaction, writes the order and its
// outbox event together. It is the plain-SQL example of docs/guides/producing.md with parameters.
// The event carries the customer's tenant ($3, ” for none), which routes it to partner endpoints.
const placeOrder = `with new_order as (insert into orders(customer, total) values ($1, $2) returning id, customer, total)
insert into outbox_events(aggregate_type, aggregate_id, event_type, payload, dedup_key, tenant_id)
select 'order', id::text, 'order.created', jsonb_build_object('order_id', id, 'customer', customer, 'total', total), 'order.created:' || id::text,
       nullif($3, '')
from new_order`

var customers = []string{"ada", "grace", "linus", "barbara", "ken", "margaret", "dennis", "frances"}

// writer places orders at a steady rate.
type writer struct {
	pool    *pgxpool.Pool
	rate    float64 // orders per second
	written atomic.Int64
	big     atomic.Int64 // orders with total >= 400: those the audit pipeline's filter passes
	// tenants counts the orders per tenant ("" for none), for what each partner should receive.
	tenants sync.Map // string → *atomic.Int64
}

// byTenant returns the orders written per tenant and in all; call it after reading what was
// received, so that a count received is never ahead of it.
func (w *writer) byTenant() (map[string]int64, int64) {
	total := w.written.Load()
	out := map[string]int64{}
	w.tenants.Range(func(k, v any) bool { out[k.(string)] = v.(*atomic.Int64).Load(); return true })
	return out, total
}

func (w *writer) countTenant(tenant string) {
	v, _ := w.tenants.LoadOrStore(tenant, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// run places orders until ctx is done. It keeps to the rate over the whole run: after a slow
// moment it writes what is due as fast as it can.
func (w *writer) run(ctx context.Context) error {
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		due := int64(w.rate * time.Since(start).Seconds())
		for w.written.Load() < due && ctx.Err() == nil {
			big, tenant, err := w.place(ctx)
			if err != nil {
				return err
			}
			if big {
				w.big.Add(1) // before written, so a sample never sees the order without it
			}
			w.countTenant(tenant)
			w.written.Add(1)
		}
	}
}

// place writes one order, and reports whether it is a big one (total >= 400) and its tenant.
// Once sent, the statement is not cancelled with ctx, so that an order that commits is always
// counted.
func (w *writer) place(ctx context.Context) (big bool, tenant string, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	customer := customers[rand.IntN(len(customers))]
	units := 5 + rand.IntN(495)
	total := fmt.Sprintf("%d.%02d", units, rand.IntN(100))
	tenant = tenantOf(customer)
	if _, err := w.pool.Exec(ctx, placeOrder, customer, total, tenant); err != nil {
		return false, "", fmt.Errorf("place order: %w", err)
	}
	return units >= 400, tenant, nil
}
